"""Action events: the user's allow-list of commands for a goal."""

from __future__ import annotations

import json

from loopx.store.queries import projections as q

def added(tx, event):
    """``body = {"name", "argv", "gate_id"?}``; adding a name again replaces its command."""
    b = event.body
    q.delete_action(tx, event.goal_id, b["name"])
    q.insert_action(tx, event.goal_id, b["name"], json.dumps(b["argv"]), b.get("source", "user"), event.at,
                    b.get("gate_id"))


def removed(tx, event):
    """``body = {"name"}``."""
    q.delete_action(tx, event.goal_id, event.body["name"])

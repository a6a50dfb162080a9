"""Action events: the user's allow-list of commands for a goal."""

from __future__ import annotations

import json



def added(tx, event):
    """``body = {"name", "argv", "gate_id"?}``; adding a name again replaces its command."""
    b = event.body
    tx.execute("DELETE FROM actions WHERE goal_id = ? AND name = ?", (event.goal_id, b["name"]))
    tx.execute(
        "INSERT INTO actions (goal_id, name, argv, source, created_at, gate_id) VALUES (?, ?, ?, ?, ?, ?)",
        (event.goal_id, b["name"], json.dumps(b["argv"]), b.get("source", "user"), event.at, b.get("gate_id")),
    )


def removed(tx, event):
    """``body = {"name"}``."""
    tx.execute("DELETE FROM actions WHERE goal_id = ? AND name = ?", (event.goal_id, event.body["name"]))

"""Todo events: added, dependencies added, claimed (with a lease and an epoch), done, blocked, reopened.

A claim's expiry is computed when the command runs and stored in the event body, so replaying
the ledger gives the same lease without consulting the clock.
"""

from __future__ import annotations

import json

from loopx.values import jsonsafe
from loopx.ledger import todo_ready
from loopx.store.queries import projections as q


def added(tx, event):
    """``body = {"todo_id", "text", "priority", "depends_on"}``; creation order is the event id."""
    b = event.body
    q.insert_todo(tx, (b["todo_id"], event.goal_id, event.id, b["text"], b["priority"], jsonsafe.plain(b["depends_on"]),
                       event.at, event.at))
    todo_ready.added(tx, event.goal_id, b["todo_id"], b["depends_on"])


def depends(tx, event):
    """``body = {"todo_id", "depends_on"}``: more dependencies (checked for cycles before emitting)."""
    b = event.body
    row = q.todo_depends_on(tx, b["todo_id"], event.goal_id)
    deps = json.loads(row["depends_on"])
    deps.extend(d for d in b["depends_on"] if d not in deps)
    q.set_todo_depends_on(tx, b["todo_id"], event.goal_id, json.dumps(deps), event.at)
    todo_ready.added(tx, event.goal_id, b["todo_id"], b["depends_on"])


def claimed(tx, event):
    """``body = {"todo_id", "agent", "run_id", "epoch", "expires_at"}``: the holder and its lease."""
    b = event.body
    q.claim_todo(tx, b["todo_id"], event.goal_id, b["agent"], b.get("run_id"), b["expires_at"], b["epoch"], event.at)


def _settle(tx, event, status):
    # Leaving the open state releases the claim; the epoch stays, so a later claim still bumps it.
    q.settle_todo(tx, event.body["todo_id"], event.goal_id, status, event.body.get("note"), event.at)
    todo_ready.settled(tx, event.goal_id, event.body["todo_id"])


def done(tx, event):
    """``body = {"todo_id", "note"?}``."""
    _settle(tx, event, "done")


def blocked(tx, event):
    """``body = {"todo_id", "note"?}``."""
    _settle(tx, event, "blocked")


def reopened(tx, event):
    """``body = {"todo_id", "note"?}``: open again, unclaimed."""
    _settle(tx, event, "open")

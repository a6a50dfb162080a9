"""Gate events: a gate is requested (by a user or an executor) and decided (by a user only)."""

from __future__ import annotations



def added(tx, event):
    """``body = {"gate_id", "title", "scope", "blocks"}``; the event's actor is who asked for it."""
    b = event.body
    tx.execute(
        "INSERT INTO gates (id, goal_id, title, scope, blocks, status, requested_by, created_at,"
        " decided_by, decided_at, comment) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, NULL, NULL, NULL)",
        (b["gate_id"], event.goal_id, b["title"], b["scope"], b["blocks"], event.actor, event.at),
    )


def _decide(tx, event, status):
    tx.execute(
        "UPDATE gates SET status = ?, decided_by = ?, decided_at = ?, comment = ? WHERE id = ? AND goal_id = ?",
        (status, event.actor, event.at, event.body.get("comment"), event.body["gate_id"], event.goal_id),
    )


# Deciding is the user's authority alone: the writers list is the enforcement.
def approved(tx, event):
    """``body = {"gate_id", "comment"?}``; the event's actor and time are the decision's."""
    _decide(tx, event, "approved")


def rejected(tx, event):
    """``body = {"gate_id", "comment"?}``; what the gate blocks stays blocked."""
    _decide(tx, event, "rejected")


def reopened(tx, event):
    """``body = {"gate_id", "comment"?}``: a decided gate is pending again, to be decided anew (the
    decision it had stays in the ledger); what it blocks is blocked until then."""
    tx.execute(
        "UPDATE gates SET status = 'pending', decided_by = NULL, decided_at = NULL, comment = ?"
        " WHERE id = ? AND goal_id = ?",
        (event.body.get("comment"), event.body["gate_id"], event.goal_id),
    )

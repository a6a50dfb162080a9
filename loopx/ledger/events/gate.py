"""Gate events: a gate is requested (by a user or an executor) and decided (by a user only)."""

from __future__ import annotations

from loopx.store.queries import projections as q

def added(tx, event):
    """``body = {"gate_id", "title", "scope", "blocks"}``; the event's actor is who asked for it."""
    b = event.body
    q.insert_gate(tx, b["gate_id"], event.goal_id, b["title"], b["scope"], b["blocks"], event.actor, event.at)


def _decide(tx, event, status):
    q.decide_gate(tx, event.body["gate_id"], event.goal_id, status, event.actor, event.at, event.body.get("comment"))


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
    q.reopen_gate(tx, event.body["gate_id"], event.goal_id, event.body.get("comment"))

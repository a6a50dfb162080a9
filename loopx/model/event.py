"""Ledger events."""

from __future__ import annotations

from loopx.model._value import Value, value


@value
class Event(Value):
    """One ledger entry: the only way state changes."""

    id: int
    goal_id: str
    seq: int
    at: str
    actor: str
    kind: str
    body: dict
    operation_id: str | None = None

"""Ledger events."""

from __future__ import annotations

import attrs


@attrs.frozen
class Event:
    """One ledger entry: the only way state changes."""

    id: int
    goal_id: str
    seq: int
    at: str
    actor: str
    kind: str
    body: dict
    operation_id: str | None = None

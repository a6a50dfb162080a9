"""Events read back from the ``events`` table."""

from __future__ import annotations

import json

from loopx.model import Event


def event_from_row(row: dict) -> Event:
    """An :class:`Event` from an ``events`` row."""
    return Event(
        id=row["id"],
        goal_id=row["goal_id"],
        seq=row["seq"],
        at=row["at"],
        actor=row["actor"],
        kind=row["kind"],
        body=json.loads(row["body"]),
        operation_id=row["operation_id"],
    )

"""Gates: human approval checkpoints."""

from __future__ import annotations

from loopx.model._value import Value, value


@value
class Gate(Value):
    """A human approval checkpoint. ``blocks`` is ``all``, ``action:NAME`` or ``todo:ID``."""

    id: str
    goal_id: str
    title: str
    scope: str
    blocks: str
    status: str
    requested_by: str
    created_at: str
    decided_by: str | None = None
    decided_at: str | None = None
    comment: str | None = None

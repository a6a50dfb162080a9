"""Todos and the claims (leases) agents hold on them."""

from __future__ import annotations

import attrs

from loopx.model._value import Value, value


@value
class Claim(Value):
    """Who holds a todo, until when, and the claim epoch (bumped on every new holder)."""

    agent: str
    run_id: str | None
    expires_at: str
    epoch: int


@value
class Todo(Value):
    """A step of the plan. ``depends_on``: the todos before it; ``actions``: the actions that do it
    (a turn on this todo runs exactly those, and it is done only when they ran)."""

    id: str
    goal_id: str
    text: str
    priority: str
    depends_on: list[str]
    status: str
    created_at: str
    updated_at: str
    note: str | None = None
    claim: Claim | None = None
    epoch: int = 0
    actions: list[str] = attrs.field(factory=list)

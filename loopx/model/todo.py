"""Todos and the claims (leases) agents hold on them."""

from __future__ import annotations

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
    """A step of the plan."""

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

"""Todos and the claims (leases) agents hold on them."""

from __future__ import annotations

import attrs


@attrs.frozen
class Claim:
    """Who holds a todo, until when, and the claim epoch (bumped on every new holder)."""

    agent: str
    run_id: str | None
    expires_at: str
    epoch: int


@attrs.frozen
class Todo:
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

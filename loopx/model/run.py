"""Actions, runs, the contracts they run under, hand-off notes, and per-run usage entries."""

from __future__ import annotations

from loopx.model._value import Value, value


@value
class Action(Value):
    """A command the operator allowed for a goal, run by ``loopx exec --action NAME``."""

    goal_id: str
    name: str
    argv: list[str]
    created_at: str
    source: str = "user"  # or "capability:NAME"
    gate_id: str | None = None  # kept out of contracts until this gate is approved


@value
class Handoff(Value):
    """The note a run leaves for whoever acts next."""

    run_id: str
    note: str
    at: str


@value
class Run(Value):
    """One agent turn, opened by ``quota should-run`` and closed by ``run finish``."""

    id: str
    goal_id: str
    agent: str
    status: str
    contract_id: str
    fingerprint: str
    opened_at: str
    expires_at: str
    finished_at: str | None = None
    outcome: str | None = None
    tokens: int = 0
    cost: float = 0.0
    handoff: str | None = None


@value
class Contract(Value):
    """An interaction contract as issued (its JSON document is kept verbatim)."""

    id: str
    goal_id: str
    run_id: str | None
    fingerprint: str
    issued_at: str
    expires_at: str
    document: dict


@value
class UsageEntry(Value):
    """One ledger-derived charge against a goal's quota (a turn opened, tokens reported...)."""

    run_id: str
    at: str
    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    wall_seconds: float = 0.0

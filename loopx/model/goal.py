"""Goals, their success criteria, and quota limits and usage."""

from __future__ import annotations

import attrs


@attrs.frozen
class Criterion:
    """One success criterion of a goal."""

    text: str
    met: bool = False


@attrs.frozen
class QuotaLimits:
    """Budget limits for a goal; ``None`` means unlimited."""

    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_wall_seconds: float | None = None
    cadence_seconds: float | None = None


@attrs.frozen
class QuotaUsage:
    """What a goal has used, derived from its ledger (never a stored counter)."""

    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    wall_seconds: float = 0.0


@attrs.frozen
class UsageEntry:
    """One ledger-derived charge against a goal's quota (a turn opened, tokens reported...)."""

    run_id: str
    at: str
    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    wall_seconds: float = 0.0


@attrs.frozen
class Goal:
    """The durable work object."""

    id: str
    title: str
    description: str
    status: str
    criteria: list[Criterion]
    limits: QuotaLimits
    grants: QuotaLimits
    parallel_runs: bool
    revision: int
    created_at: str
    updated_at: str
    status_reason: str | None = None

"""Goals, their success criteria, and quota limits and usage totals."""

from __future__ import annotations

from loopx.model import BUDGETS  # noqa: F401  (the one budget-name table; importable from here too)
import attrs

from loopx.model._value import Value, value


@value
class Criterion(Value):
    """One success criterion of a goal."""

    text: str
    met: bool = False


@value
class QuotaLimits(Value):
    """Budget limits for a goal; ``None`` means unlimited."""

    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_wall_seconds: float | None = None
    cadence_seconds: float | None = None
    stuck_after: int | None = None  # failed runs in a row at one step before asking a user (default 3)


@value
class QuotaUsage(Value):
    """What a goal has used, derived from its ledger (never a stored counter)."""

    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    wall_seconds: float = 0.0


@value
class Goal(Value):
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
    #: The capabilities the goal uses (sorted names; ``loopx project-prompt capabilities``). Only
    #: these, and capabilities on for every goal, contribute steps, veto or hear its events.
    capabilities: list[str] = attrs.field(factory=list)

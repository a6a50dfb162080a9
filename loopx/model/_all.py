"""The vocabulary of LoopX as attrs classes, and the one cattrs converter for the edges.

These are plain values: the registry builds them from rows, the CLI and the status server turn
them into JSON with :func:`to_json`. Nothing here touches storage.
"""

from __future__ import annotations

import attrs
import cattrs

GOAL_STATUSES = ("open", "paused", "closed")
GATE_SCOPES = ("production", "privacy", "safety", "other")
GATE_STATUSES = ("pending", "approved", "rejected")
TODO_STATUSES = ("open", "done", "blocked")
TODO_PRIORITIES = ("P0", "P1", "P2", "P3", "P4")
RUN_STATUSES = ("open", "finished", "abandoned")
RUN_OUTCOMES = ("ok", "partial", "failed")
ACTORS = ("user", "executor", "dashboard", "core")  # plus "capability:NAME"


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


@attrs.frozen
class Gate:
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


@attrs.frozen
class Action:
    """A command the operator allowed for a goal, run by ``loopx exec --action NAME``."""

    goal_id: str
    name: str
    argv: list[str]
    created_at: str
    source: str = "user"  # or "capability:NAME"


@attrs.frozen
class Handoff:
    """The note a run leaves for whoever acts next."""

    run_id: str
    note: str
    at: str


@attrs.frozen
class Run:
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


@attrs.frozen
class Contract:
    """An interaction contract as issued (its JSON document is kept verbatim)."""

    id: str
    goal_id: str
    run_id: str | None
    fingerprint: str
    issued_at: str
    expires_at: str
    document: dict


@attrs.frozen
class Evidence:
    """An append-only observation bound to a run."""

    id: str
    goal_id: str
    run_id: str | None
    kind: str
    summary: str
    actor: str
    created_at: str
    data: dict | list | None = None
    file_path: str | None = None
    file_sha256: str | None = None


@attrs.frozen
class Reward:
    """The ``human_reward`` overlay: a user's score in [-1, 1] on one run."""

    id: str
    goal_id: str
    run_id: str
    score: float
    author: str
    created_at: str
    comment: str | None = None


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


converter = cattrs.Converter()


def to_json(value):
    """Turn a model value (or list/dict of them) into JSON-ready data."""
    return converter.unstructure(value)


def from_json(data, cls):
    """Build a model value of ``cls`` from JSON-ready data."""
    return converter.structure(data, cls)

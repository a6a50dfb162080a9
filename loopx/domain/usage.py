"""Quota arithmetic: what a goal has used, what it may still use, and the contract fingerprint.

Usage is what the ledger's ``run.*`` events charged: a turn is a run opened; tokens and cost
are what ``run finish`` reported; wall seconds are ``finished_at - opened_at`` of every closed
run, never past its expiry (an abandoned run is charged up to its expiry). The run events keep
it in counters (:mod:`loopx.ledger.usage_counts`) in the same transaction as the run rows, through the
apply functions a replay runs, so the counters cannot drift from the ledger: a rebuild makes
the same ones, and ``self-repair check`` compares them like every other state row.
"""

from __future__ import annotations

import json
from hashlib import sha256

from loopx.values.jsonsafe import canonical
from loopx.model import Goal, QuotaLimits, QuotaUsage
from loopx.model.goal import BUDGETS  # noqa: F401  (usage name -> limit name; the one table)
from loopx.store.queries import usage as q


def usage(tx, goal_id: str, *, exclude_run: str | None = None) -> QuotaUsage:
    """What ``goal_id`` has used (without ``exclude_run``'s own charges when given): its usage
    counters (:mod:`loopx.ledger.usage_counts`), one row whatever the goal's history."""
    from loopx.ledger import usage_counts

    used = usage_counts.read(tx, goal_id)
    turns, tokens, cost_micros, wall = used["turns"], used["tokens"], used["cost_micros"], used["wall_us"]
    if exclude_run:
        run = q.run_charged(tx, exclude_run, goal_id)
        if run is not None:
            turns, tokens = turns - 1, tokens - int(run["tokens"] or 0)
            cost_micros -= usage_counts.micros(run["cost"])
            wall -= usage_counts.wall_us(run["opened_at"], run["finished_at"], run["expires_at"])
    return QuotaUsage(turns=turns, tokens=tokens, cost=round(cost_micros / 1_000_000, 6),
                      wall_seconds=round(max(0, wall) / 1_000_000, 3))


def effective_limits(goal: Goal) -> QuotaLimits:
    """The goal's limits raised by its grants (a grant on an unlimited budget changes nothing)."""
    values = {}
    for name in BUDGETS.values():
        base = getattr(goal.limits, name)
        values[name] = None if base is None else base + (getattr(goal.grants, name) or 0)
    return QuotaLimits(cadence_seconds=goal.limits.cadence_seconds, stuck_after=goal.limits.stuck_after, **values)


def remaining(goal: Goal, used: QuotaUsage) -> dict:
    """``{"turns", "tokens", "cost", "wall_seconds"}`` left; ``None`` means unlimited."""
    limits = effective_limits(goal)
    out = {}
    for key, name in BUDGETS.items():
        cap = getattr(limits, name)
        if cap is None:
            out[key] = None
        else:
            left = max(0, cap - getattr(used, key))
            out[key] = round(left, 6) if isinstance(left, float) else left
    return out


def exhausted(goal: Goal, used: QuotaUsage) -> list[str]:
    """The budgets with nothing left (``turns``, ``tokens``, ``cost``, ``wall_seconds``), in that order."""
    left = remaining(goal, used)
    return [key for key, value in left.items() if value is not None and value <= 0]


def fingerprint(tx, goal: Goal, *, exclude_run: str | None = None) -> str:
    """``sha256:...`` of what a turn decision depends on.

    Lifecycle, limits and grants, parallelism, every gate (id, status, what it blocks), the
    allow-listed actions, and which budgets are exhausted. A run's own charges are left out
    (``exclude_run``) so that opening a run does not make its own contract stale; the ready
    set is left out because claims are guarded by their own leases.
    """
    gates = q.fingerprinted_gates(tx, goal.id)
    actions = q.fingerprinted_actions(tx, goal.id)
    return fingerprint_of(goal, [(g["id"], g["status"], g["blocks"]) for g in gates],
                          [(a["name"], json.loads(a["argv"]), a["gate_id"]) for a in actions],
                          usage(tx, goal.id, exclude_run=exclude_run))


def fingerprint_of(goal: Goal, gates, actions, used: QuotaUsage) -> str:
    """The fingerprint from values already read: ``gates`` as ``(id, status, blocks)``, ``actions`` as
    ``(name, argv, gate_id)`` (any order), ``used`` without the run's own charges."""
    inputs = {
        "goal": goal.id,
        "status": goal.status,
        "limits": attrs_dict(effective_limits(goal)),
        "parallel_runs": goal.parallel_runs,
        "gates": [list(g) for g in sorted(gates)],
        "actions": [list(a) for a in sorted(actions, key=lambda a: a[0])],
        "exhausted": exhausted(goal, used),
    }
    blob = canonical(inputs).encode()
    return "sha256:" + sha256(blob).hexdigest()


def attrs_dict(limits: QuotaLimits) -> dict:
    """Limits as a dict without the unlimited (``None``) entries."""
    import attrs

    return {k: v for k, v in attrs.asdict(limits).items() if v is not None}


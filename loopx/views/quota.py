"""``quota``: budgets, grants and usage (``quota set``, ``quota grant``, ``quota show``).

The arithmetic lives in :mod:`loopx.domain.usage`; the turn decision (``quota should-run``) in
:mod:`loopx.views.should_run`.
"""

from __future__ import annotations

import attrs

from loopx.values import clock
from loopx.values.errors import LoopxError
from loopx.model import QuotaLimits, to_json
from loopx.ledger.registry import Registry
from loopx.values.clock import add_seconds, seconds_between
from loopx.domain.usage import (  # noqa: F401  (fingerprint, usage, remaining: the public API)
    effective_limits, exhausted, fingerprint, remaining, usage)
from loopx.values.validate import check_id, check_number

LIMIT_BOUNDS = {"max_turns": (0, 10**9, True), "max_tokens": (0, 10**15, True), "max_cost": (0, 10**9, False),
                "max_wall_seconds": (0, 10**9, False), "cadence_seconds": (0, 10**8, False),
                "stuck_after": (0, 1000, True)}
GRANT_BOUNDS = {"turns": (1, 10**9, True), "tokens": (1, 10**15, True), "cost": (0.000001, 10**9, False),
                "wall_seconds": (0.001, 10**9, False)}
ENTRIES_SHOWN = 20


def _limits_from(goal) -> dict:
    return attrs.asdict(goal.limits)


def set_limits(reg: Registry, actor: str, *, goal_id: str, values: dict, unset=(),
               operation_id: str | None = None) -> dict:
    """Set some of a goal's limits (user only); ``unset`` names limits to make unlimited again."""
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    given = {k: v for k, v in values.items() if v is not None}
    for key in [*given, *unset]:
        if key not in LIMIT_BOUNDS:
            raise LoopxError("invalid_argument", f"unknown limit {key!r} (one of {', '.join(LIMIT_BOUNDS)})")
    for key, value in given.items():
        low, high, integer = LIMIT_BOUNDS[key]
        given[key] = check_number(value, what="--" + key.replace("_", "-"), minimum=low, maximum=high,
                                  integer=integer)
    clash = set(given) & set(unset)
    if clash:
        raise LoopxError("invalid_argument", f"cannot both set and unset {', '.join(sorted(clash))}")
    if not given and not unset:
        raise LoopxError("invalid_argument", "name at least one limit to set (e.g. --max-turns 20) or --unset")

    def work(w):
        limits = _limits_from(load_goal(w.tx, goal_id))
        limits.update(given)
        for key in unset:
            limits[key] = None
        w.emit("quota.set", {"limits": limits})
        return _show(w.tx, goal_id, w.at)

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "quota.set", "goal": goal_id, "values": given, "unset": sorted(unset)})


def grant(reg: Registry, actor: str, *, goal_id: str, amounts: dict, operation_id: str | None = None) -> dict:
    """Grant more budget (user only): ``amounts`` has ``turns``, ``tokens``, ``cost``, ``wall_seconds``."""
    check_id("goal", goal_id)
    given = {}
    for key, value in amounts.items():
        if value is None:
            continue
        if key not in GRANT_BOUNDS:
            raise LoopxError("invalid_argument", f"unknown budget {key!r} (one of {', '.join(GRANT_BOUNDS)})")
        low, high, integer = GRANT_BOUNDS[key]
        given[key] = check_number(value, what="--" + key.replace("_", "-"), minimum=low, maximum=high,
                                  integer=integer)
    if not given:
        raise LoopxError("invalid_argument", "grant at least one of --turns, --tokens, --cost, --wall-seconds")

    def work(w):
        w.emit("quota.granted", given)
        return _show(w.tx, goal_id, w.at)

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "quota.grant", "goal": goal_id, **given})


def show(reg: Registry, goal_id: str) -> dict:
    """A goal's limits, grants, usage (derived from its runs), what remains, and the latest charges."""
    check_id("goal", goal_id)
    with reg.read() as tx:
        return _show(tx, goal_id, clock.now())


def _show(tx, goal_id: str, now: str) -> dict:
    from loopx.domain import runs
    from loopx.model import UsageEntry
    from loopx.domain.goals import load_goal
    from loopx.store.queries.runs import goal_runs

    goal = load_goal(tx, goal_id)
    used = usage(tx, goal_id)
    cadence = goal.limits.cadence_seconds
    next_at = None
    if cadence:
        from loopx.ledger import usage_counts

        last = usage_counts.read(tx, goal_id)["last_opened"]
        if last is not None and add_seconds(last, cadence) > now:
            next_at = add_seconds(last, cadence)
    entries = []
    for row in goal_runs(tx, goal_id, ENTRIES_SHOWN):
        run = runs.run_from_row(row)
        wall = seconds_between(run.opened_at, run.finished_at) if run.finished_at else 0.0
        entries.append(to_json(UsageEntry(run_id=run.id, at=run.opened_at, turns=1, tokens=run.tokens,
                                          cost=run.cost, wall_seconds=round(max(0.0, wall), 3))))
    return {
        "goal_id": goal_id,
        "limits": to_json(goal.limits),
        "grants": {k: v for k, v in to_json(goal.grants).items() if v is not None},
        "effective": to_json(effective_limits(goal)),
        "used": to_json(used),
        "remaining": remaining(goal, used),
        "exhausted": exhausted(goal, used),
        "next_eligible_at": next_at,
        "open_runs": [r.id for r in runs.open_runs(tx, goal_id, now)],
        "entries": entries,
    }


__all__ = ["set_limits", "grant", "show", "fingerprint", "usage", "remaining", "effective_limits",
           "exhausted", "QuotaLimits"]

"""Reads of many goals at once for the status projection (:mod:`loopx.views.status`): usage and quota
pictures, the newest runs, each fetched in batches of ids so the cost follows the page size."""

from __future__ import annotations

import functools
import json

import attrs

from loopx.store.queries import status as q


# ----------------------------------------------------------------------------- small helpers


def revision(tx) -> int:
    """The registry's revision: the id of its newest event (0 when empty). Cheap: a primary-key max."""
    return q.registry_revision(tx)


def loads_or(text, default):
    """``json.loads(text)``, or ``default`` for ``None``."""
    if text is None:
        return default
    return json.loads(text)


# ----------------------------------------------------------------------------- quota


@attrs.frozen
class Budget:
    """What :mod:`loopx.domain.usage` reads from a goal (its limits and grants), without the whole goal."""

    limits: object
    grants: object


def budget_of(row: dict) -> Budget:
    """The :class:`Budget` of a ``goals`` row."""
    return _parsed_budget(row.get("limits") or "{}", row.get("grants") or "{}")


# Many goals share the same limits text; parsing it once per distinct text keeps the
# registry-wide attention scan cheap.
@functools.lru_cache(maxsize=1024)
def _parsed_budget(limits: str, grants: str) -> Budget:
    from loopx.model import QuotaLimits

    return Budget(QuotaLimits(**json.loads(limits)), QuotaLimits(**json.loads(grants)))


def usage_many(tx, goal_ids: list[str]) -> dict:
    """``{goal_id: QuotaUsage}`` for many goals from their usage counters (:mod:`loopx.ledger.usage_counts`),
    the same answers as :func:`loopx.domain.usage.usage` (a test holds the two together)."""
    from loopx.ledger import usage_counts
    from loopx.model import QuotaUsage

    if not goal_ids:
        return {}
    found = {r["goal_id"]: r for r in q.usage_rows(tx, list(goal_ids))}
    out = {}
    for g in goal_ids:
        raw = usage_counts.ZERO if g not in found else usage_counts.read_row(found[g])
        out[g] = QuotaUsage(**usage_counts.shown(raw))
    return out


def quota_picture(budget, used) -> dict:
    """Limits, grants, used, remaining (``None`` = unlimited) and the exhausted budgets."""
    import attrs

    from loopx.domain import usage

    # Flat values of plain numbers: attrs' asdict gives what cattrs would, without importing
    # cattrs and generating its converters on the overview's path (a page has 50 of these).
    effective = usage.effective_limits(budget)
    return {
        "limits": attrs.asdict(budget.limits),
        "grants": attrs.asdict(budget.grants),
        "budget": {k: getattr(effective, n) for k, n in usage.BUDGETS.items()},
        "used": attrs.asdict(used),
        "remaining": usage.remaining(budget, used),
        "exhausted": usage.exhausted(budget, used),
    }


def quota_for(tx, goal_rows: list[dict]) -> dict[str, dict]:
    """``{goal_id: quota picture}`` for a batch of goal rows."""
    used = usage_many(tx, [g["id"] for g in goal_rows])
    return {g["id"]: quota_picture(budget_of(g), used[g["id"]]) for g in goal_rows}


# ----------------------------------------------------------------------------- runs


def latest_runs(tx, goal_ids: list[str], status: str | None = None) -> dict[str, dict]:
    """The newest run (optionally of one status) of each goal in ``goal_ids``."""
    if not goal_ids:
        return {}
    rows = q.newest_runs(tx, goal_ids, status)
    out: dict[str, dict] = {}
    for r in rows:
        # Two runs opened in the same microsecond: pick one deterministically.
        if r["goal_id"] not in out or r["id"] > out[r["goal_id"]]["id"]:
            out[r["goal_id"]] = r
    return out

"""Reads of many goals at once for the status projection (:mod:`loopx.status`): usage and quota
pictures, the newest runs, each fetched in batches of ids so the cost follows the page size."""

from __future__ import annotations

import functools
import json

import attrs

_CHUNK = 500  # ids per IN (...) list: far below every backend's parameter limit


# ----------------------------------------------------------------------------- small helpers


def revision(tx) -> int:
    """The registry's revision: the id of its newest event (0 when empty). Cheap: a primary-key max."""
    row = tx.one("SELECT max(id) AS m FROM events")
    return int(row["m"] or 0) if row else 0


def in_query(tx, sql: str, ids: list[str], extra: tuple = ()) -> list[dict]:
    """Run ``sql`` (with one ``{ids}`` placeholder list) over ``ids`` in chunks."""
    rows: list[dict] = []
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        rows.extend(tx.query(sql.format(ids=marks), (*chunk, *extra)))
    return rows


def loads_or(text, default):
    """``json.loads(text)``, or ``default`` for ``None``."""
    if text is None:
        return default
    return json.loads(text)


# ----------------------------------------------------------------------------- quota


@attrs.frozen
class Budget:
    """What :mod:`loopx.usage` reads from a goal (its limits and grants), without the whole goal."""

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
    """``{goal_id: QuotaUsage}`` for many goals from their usage counters (:mod:`loopx.usage_counts`),
    the same answers as :func:`loopx.usage.usage` (a test holds the two together)."""
    from loopx import usage_counts
    from loopx.model import QuotaUsage

    if not goal_ids:
        return {}
    sql = "SELECT goal_id, turns, tokens, cost_micros, wall_us, last_opened FROM goal_usage WHERE goal_id IN ({ids})"
    found = {r["goal_id"]: r for r in in_query(tx, sql, list(goal_ids))}
    out = {}
    for g in goal_ids:
        raw = usage_counts.ZERO if g not in found else usage_counts.read_row(found[g])
        out[g] = QuotaUsage(**usage_counts.shown(raw))
    return out


def quota_picture(budget, used) -> dict:
    """Limits, grants, used, remaining (``None`` = unlimited) and the exhausted budgets."""
    import attrs

    from loopx import usage

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
    cond = " AND r2.status = ?" if status else ""
    outer = " AND r.status = ?" if status else ""
    extra = (status, status) if status else ()
    rows = in_query(
        tx,
        "SELECT * FROM runs r WHERE r.goal_id IN ({ids})" + outer + " AND r.opened_at ="
        " (SELECT max(r2.opened_at) FROM runs r2 WHERE r2.goal_id = r.goal_id" + cond + ")",
        goal_ids,
        extra,
    )
    out: dict[str, dict] = {}
    for r in rows:
        # Two runs opened in the same microsecond: pick one deterministically.
        if r["goal_id"] not in out or r["id"] > out[r["goal_id"]]["id"]:
            out[r["goal_id"]] = r
    return out

"""Quota usage kept in counters: one ``goal_usage`` row per goal, moved by the run events.

What a goal has used (turns, tokens, cost, wall seconds) is written by the ``run.*`` apply
functions in the same transaction as the run row they change, so reading it is one indexed row,
whatever the goal's history. The apply functions are what a ledger rebuild replays, so the
counters a replay produces are the counters the writes produced; ``goal_usage`` is one of the
goal's state tables (``loopx.store.schema.GOAL_TABLES``), compared like every other.

The counters are integers - tokens, cost in millionths, wall time in microseconds - so their
sum does not depend on the order runs were charged in: a migration that derives them from the
``runs`` rows (:func:`from_runs`) gets exactly what replaying the ledger gets.

The rules (those of ``loopx.domain.usage``): a turn is a run opened; tokens and cost are what ``run
finish`` reported; wall time is that of a closed run, from its opening to when it finished,
never past its expiry (an abandoned run is charged up to its expiry).
"""

from __future__ import annotations

from loopx.values.clock import parse
from loopx.store.queries import usage as q


def micros(cost) -> int:
    """A cost in millionths (how the counter holds it)."""
    return int(round(float(cost or 0) * 1_000_000))


def wall_us(opened_at: str, finished_at: str | None, expires_at: str) -> int:
    """The wall time charged for a closed run, in microseconds (0 for an open one)."""
    if finished_at is None:
        return 0
    end = min(finished_at, expires_at)  # fixed-width timestamps compare as text
    delta = parse(end) - parse(opened_at)
    return max(0, (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def opened(tx, goal_id: str, at: str) -> None:
    """A run was opened at ``at``: one more turn."""
    q.count_run_opened(tx, goal_id, at)


def charge(tx, goal_id: str, before: dict | None, after: dict) -> None:
    """A run row changed from ``before`` to ``after`` (``opened_at``, ``expires_at``,
    ``finished_at``, ``tokens``, ``cost``): add the difference in what it charges."""
    old_wall = wall_us(before["opened_at"], before["finished_at"], before["expires_at"]) if before else 0
    new_wall = wall_us(after["opened_at"], after["finished_at"], after["expires_at"])
    d_tokens = int(after["tokens"] or 0) - (int(before["tokens"] or 0) if before else 0)
    d_cost = micros(after["cost"]) - (micros(before["cost"]) if before else 0)
    d_wall = new_wall - old_wall
    if d_tokens or d_cost or d_wall:
        q.add_charges(tx, goal_id, d_tokens, d_cost, d_wall)


def read(tx, goal_id: str) -> dict:
    """``{"turns", "tokens", "cost_micros", "wall_us", "last_opened"}`` of one goal (zeros without runs)."""
    return _raw(q.counters(tx, goal_id))


def read_many(tx, goal_ids: list[str]) -> dict[str, dict]:
    """:func:`read` for several goals in one statement (goals without runs are left out)."""
    if not goal_ids:
        return {}
    return {r["goal_id"]: _raw(r) for r in q.counters_of(tx, goal_ids)}


def read_row(row: dict) -> dict:
    """A ``goal_usage`` row read by the caller, as :func:`read` gives it."""
    return _raw(row)


def _raw(row: dict | None) -> dict:
    if row is None:
        return dict(ZERO)
    return {"turns": int(row["turns"]), "tokens": int(row["tokens"]), "cost_micros": int(row["cost_micros"]),
            "wall_us": int(row["wall_us"]), "last_opened": row["last_opened"]}


ZERO = {"turns": 0, "tokens": 0, "cost_micros": 0, "wall_us": 0, "last_opened": None}


def shown(raw: dict) -> dict:
    """Counters as the usage the rest of LoopX speaks: ``{"turns", "tokens", "cost", "wall_seconds"}``."""
    return {"turns": raw["turns"], "tokens": raw["tokens"], "cost": round(raw["cost_micros"] / 1_000_000, 6),
            "wall_seconds": round(max(0, raw["wall_us"]) / 1_000_000, 3)}


def from_runs(tx, goal_id: str | None = None) -> dict[str, tuple]:
    """``{goal_id: (turns, tokens, cost_micros, wall_us, last_opened)}`` summed from the ``runs``
    rows by the counters' rules (the migration's source, and what a test holds the counters to)."""
    out: dict[str, list] = {}
    for r in q.run_charges(tx, goal_id):
        c = out.setdefault(r["goal_id"], [0, 0, 0, 0, None])
        c[0] += 1
        c[1] += int(r["tokens"] or 0)
        c[2] += micros(r["cost"])
        c[3] += wall_us(r["opened_at"], r["finished_at"], r["expires_at"])
        if c[4] is None or r["opened_at"] > c[4]:
            c[4] = r["opened_at"]
    return {g: tuple(c) for g, c in out.items()}


def backfill(tx) -> int:
    """Schema step: fill ``goal_usage`` from every goal's runs. Returns the number of goals."""
    counted = from_runs(tx)
    rows = [(g, *c) for g, c in counted.items()]
    q.replace_counters(tx, rows)
    return len(rows)

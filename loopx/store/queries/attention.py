"""The attention summary's SQL (:mod:`loopx.ledger.attention`): the ``goal_summary`` row each write keeps,
its rebuild over the whole registry, and the ``summary_counts`` totals. On every write's path
(``quota should-run`` included): nothing is imported here.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]

# Everything the summary row follows from, and the row as stored, in one statement: refresh runs
# inside every write that can move a goal, so its reads are one indexed probe per part.
_INPUTS = (
    "SELECT g.status, g.created_seq, g.limits, g.grants,"
    " (SELECT 1 FROM gates WHERE goal_id = g.id AND status = 'pending' LIMIT 1) AS gate_pending,"
    " (SELECT status FROM runs WHERE goal_id = g.id ORDER BY opened_at DESC, id DESC LIMIT 1) AS newest,"
    " (SELECT outcome FROM runs WHERE goal_id = g.id AND status = 'finished'"
    " ORDER BY opened_at DESC, id DESC LIMIT 1) AS newest_done,"
    " (SELECT min(expires_at) FROM runs WHERE goal_id = g.id AND status = 'open') AS expiry,"
    " (SELECT 1 FROM todos WHERE goal_id = g.id LIMIT 1) AS has_todos,"
    " (SELECT 1 FROM todo_ready WHERE goal_id = g.id LIMIT 1) AS has_ready,"
    " u.turns, u.tokens, u.cost_micros, u.wall_us, u.last_opened,"
    " s.goal_id AS have, s.status AS have_status, s.created_seq AS have_created_seq, s.lane AS have_lane,"
    " s.attention AS have_attention, s.run_expires AS have_run_expires"
    " FROM goals g LEFT JOIN goal_usage u ON u.goal_id = g.id LEFT JOIN goal_summary s ON s.goal_id = g.id"
    " WHERE g.id = ?")

_INSERT = "INSERT INTO goal_summary (goal_id, status, created_seq, lane, attention, run_expires) VALUES (?, ?, ?, ?, ?, ?)"


# --- one goal, inside every write ---


def summary_inputs(tx, goal_id: str) -> Row | None:
    """What the goal's summary row follows from (its status, order, limits, newest runs, todos,
    usage counters), and the row as stored (``have_*``; ``have`` None without one); None without a goal row."""
    return tx.one(_INPUTS, (goal_id,))


def delete_summary(tx, goal_id: str) -> None:
    """Drop the goal's summary row."""
    tx.execute("DELETE FROM goal_summary WHERE goal_id = ?", (goal_id,))


def insert_summary(tx, goal_id: str, row: tuple) -> None:
    """Write the goal's summary row: ``row`` is ``(status, created_seq, lane, attention, run_expires)``."""
    tx.execute(_INSERT, (goal_id, *row))


def update_summary(tx, goal_id: str, row: tuple) -> None:
    """Change the goal's summary row to ``row`` (as :func:`insert_summary` takes it)."""
    tx.execute("UPDATE goal_summary SET status = ?, created_seq = ?, lane = ?, attention = ?, run_expires = ?"
               " WHERE goal_id = ?", (*row, goal_id))


# --- the whole registry (a migration, a repair tool) ---


def clear_summaries(tx) -> None:
    """Drop every summary row."""
    tx.execute("DELETE FROM goal_summary")


def goals_with_pending_gates(tx) -> list[Row]:
    """``{"goal_id"}`` of every goal with a pending gate."""
    return tx.query("SELECT DISTINCT goal_id FROM gates WHERE status = 'pending'")


def every_run(tx) -> list[Row]:
    """Every run's goal, id, status, outcome and opening time."""
    return tx.query("SELECT goal_id, id, status, outcome, opened_at FROM runs")


def goals_with_todos(tx) -> set[str]:
    """The goals that have a todo."""
    return {r["goal_id"] for r in tx.query("SELECT DISTINCT goal_id FROM todos")}


def goals_with_ready_todos(tx) -> set[str]:
    """The goals with a todo in the ready index."""
    return {r["goal_id"] for r in tx.query("SELECT DISTINCT goal_id FROM todo_ready")}


def open_run_expiries(tx) -> dict[str, str]:
    """``{goal_id: the earliest expiry of its open runs}`` for the goals with one."""
    return {r["goal_id"]: r["e"] for r in tx.query(
        "SELECT goal_id, min(expires_at) AS e FROM runs WHERE status = 'open' GROUP BY goal_id")}


def goal_budgets(tx) -> list[Row]:
    """Every goal's id, status, creation order, limits and grants."""
    return tx.query("SELECT id, status, created_seq, limits, grants FROM goals")


def insert_summaries(tx, rows: list[tuple]) -> None:
    """Write summary rows ``(goal_id, status, created_seq, lane, attention, run_expires)`` in batches."""
    for start in range(0, len(rows), 10_000):
        tx.executemany(_INSERT, rows[start:start + 10_000])


# --- the totals ---


def summary_counts(tx) -> list[Row]:
    """``(key, n)``: each total, its shards summed."""
    return tx.query("SELECT key, SUM(n) AS n FROM summary_counts GROUP BY key")


def seed_count(tx, key: str, shard: int) -> None:
    """The counter row ``key``/``shard`` at zero."""
    tx.execute("INSERT INTO summary_counts (key, shard, n) VALUES (?, ?, 0)", (key, shard))


def attention_lane_goals(tx) -> list[str]:
    """The goals of the attention lane (those that may need a person)."""
    return [r["goal_id"] for r in tx.query("SELECT goal_id FROM goal_summary WHERE lane = 2")]


# --- needs you (loopx.views.needs_you) ---


def holds_a_claim(tx, goal_id: str, now: str) -> bool:
    """Whether an agent's claim holds one of the goal's open todos at ``now`` (not free under the one
    readiness rule, :func:`loopx.store.queries.projections.free_sql`, asked for no agent)."""
    from loopx.store.queries.projections import free_params, free_sql

    free = free_sql("t", None)
    sql = f"SELECT 1 AS held FROM todos t WHERE t.goal_id = ? AND t.status = 'open' AND NOT {free} LIMIT 1"
    return bool(tx.one(sql, (goal_id, *free_params(None, now))))


def newest_run(tx, goal_id: str) -> Row | None:
    """The id and status of the goal's newest run (None without runs)."""
    return tx.one("SELECT id, status FROM runs WHERE goal_id = ? ORDER BY opened_at DESC, id DESC LIMIT 1", (goal_id,))

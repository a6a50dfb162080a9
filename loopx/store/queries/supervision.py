"""What supervising workers reads and writes (:mod:`loopx.domain.supervision`): settings, the workers'
heartbeats, the goals' leases and their fencing tokens, the clock jumps workers noticed, and what
the worker's schedule reads of the open goals.
"""

from __future__ import annotations

from typing import Any

from loopx.store.dialect import of as dialect_of

Row = dict[str, Any]


# --- settings ---


def all_settings(tx) -> list[Row]:
    """Every setting (key, value), by key."""
    return tx.query("SELECT key, value FROM settings ORDER BY key")


def put_setting(tx, key: str, value: str | None, at: str) -> None:
    """Set the setting ``key`` to ``value`` at ``at`` (``None``: remove it)."""
    tx.execute("DELETE FROM settings WHERE key = ?", (key,))
    if value is not None:
        tx.execute("INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?)", (key, value, at))


# --- heartbeats ---


def worker_info(tx, worker_id: str) -> Row | None:
    """``{"info"}`` (JSON text) of the worker's row, or None when it never beat."""
    return tx.one("SELECT info FROM workers WHERE id = ?", (worker_id,))


def add_worker(tx, worker_id: str, host: str, pid: int, started_at: str, beat_at: str, goals: str,
               stopped_at: str | None, info: str) -> None:
    """The worker's first heartbeat (``goals``, ``info``: JSON text)."""
    tx.execute("INSERT INTO workers (id, host, pid, started_at, beat_at, goals, stopped_at, info)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (worker_id, host, pid, started_at, beat_at, goals, stopped_at, info))


def worker_beat(tx, worker_id: str, beat_at: str, goals: str, stopped_at: str | None, info: str) -> None:
    """A later heartbeat of the worker (``goals``, ``info``: JSON text)."""
    tx.execute("UPDATE workers SET beat_at = ?, goals = ?, stopped_at = ?, info = ? WHERE id = ?",
               (beat_at, goals, stopped_at, info, worker_id))


def worker_stop_state(tx, worker_id: str) -> Row | None:
    """``{"info", "stopped_at"}`` of the worker's row, or None."""
    return tx.one("SELECT info, stopped_at FROM workers WHERE id = ?", (worker_id,))


def set_worker_info(tx, worker_id: str, info: str) -> None:
    """Replace the worker's ``info`` (JSON text)."""
    tx.execute("UPDATE workers SET info = ? WHERE id = ?", (info, worker_id))


def recent_workers(tx, limit: int) -> list[Row]:
    """The ``limit`` workers that beat last, newest beat first."""
    return tx.query("SELECT * FROM workers ORDER BY beat_at DESC, id LIMIT ?", (limit,))


def worker_owner(tx, worker_id: str) -> Row | None:
    """``{"host", "pid", "stopped_at", "info"}`` of the worker's row, or None."""
    return tx.one("SELECT host, pid, stopped_at, info FROM workers WHERE id = ?", (worker_id,))


# --- leases ---


def held_lease(tx, goal_id: str) -> Row:
    """The goal's lease row (worker_id, token, expires_at), made first if the goal never had one
    (token 0, expired), and held against other writers until the transaction ends."""
    # The row first, then held: on PostgreSQL two workers racing for a goal never leased before
    # must not both read "no lease".
    tx.execute("INSERT INTO goal_leases (goal_id, worker_id, token, expires_at) VALUES (?, '', 0, '')"
               " ON CONFLICT (goal_id) DO NOTHING", (goal_id,))
    return tx.one("SELECT worker_id, token, expires_at FROM goal_leases WHERE goal_id = ?"
                  + dialect_of(tx).lock_row, (goal_id,))


def take_lease(tx, goal_id: str, worker_id: str, token: int, until: str) -> None:
    """The goal's lease to ``worker_id`` with fencing token ``token`` until ``until``."""
    tx.execute("UPDATE goal_leases SET worker_id = ?, token = ?, expires_at = ? WHERE goal_id = ?",
               (worker_id, token, until, goal_id))


def lease_token(tx, goal_id: str) -> Row | None:
    """``{"worker_id", "token"}`` of the goal's lease, or None."""
    return tx.one("SELECT worker_id, token FROM goal_leases WHERE goal_id = ?", (goal_id,))


def extend_lease(tx, goal_id: str, until: str) -> None:
    """The goal's lease now expires at ``until``."""
    tx.execute("UPDATE goal_leases SET expires_at = ? WHERE goal_id = ?", (until, goal_id))


def end_lease(tx, goal_id: str, worker_id: str, token: int, at: str) -> None:
    """The goal's lease, if ``worker_id`` still holds it with ``token``, expires at ``at``."""
    tx.execute("UPDATE goal_leases SET expires_at = ? WHERE goal_id = ? AND worker_id = ? AND token = ?",
               (at, goal_id, worker_id, token))


def lease(tx, goal_id: str) -> Row | None:
    """The goal's lease row (worker_id, token, expires_at), or None."""
    return tx.one("SELECT worker_id, token, expires_at FROM goal_leases WHERE goal_id = ?", (goal_id,))


# --- clock jumps ---


def add_clock_jump(tx, worker_id: str, seen_at: str, jump_seconds: float, detail: str) -> None:
    """A clock jump the worker noticed (``detail``: JSON text)."""
    tx.execute("INSERT INTO clock_jumps (worker_id, seen_at, jump_seconds, detail) VALUES (?, ?, ?, ?)",
               (worker_id, seen_at, jump_seconds, detail))


def recent_clock_jumps(tx, limit: int) -> list[Row]:
    """The ``limit`` newest clock jumps, newest first."""
    return tx.query("SELECT * FROM clock_jumps ORDER BY id DESC LIMIT ?", (limit,))


# --- what is due ---


def open_goals_due(tx, now: str, goal_ids: list[str] | None = None) -> list[Row]:
    """The open goals (or those among ``goal_ids``: a few hundred at most) with their id, revision,
    limits, attention codes and the latest run opened not after ``now`` (``last_opened``)."""
    sql = ("SELECT g.id, g.revision, g.limits, s.attention,"
           " (SELECT MAX(r.opened_at) FROM runs r WHERE r.goal_id = g.id AND r.opened_at <= ?) AS last_opened"
           " FROM goals g LEFT JOIN goal_summary s ON s.goal_id = g.id WHERE g.status = 'open'")
    params: list = [now]
    if goal_ids is not None:
        sql += " AND g.id IN (" + ", ".join("?" * len(goal_ids)) + ")"
        params += goal_ids
    return tx.query(sql, params)


def run_spent(tx, run_id: str) -> Row | None:
    """``{"tokens", "cost"}`` a run reported, or None when there is no such run."""
    return tx.one("SELECT tokens, cost FROM runs WHERE id = ?", (run_id,))


def last_retried_at(tx, goal_id: str) -> Row | None:
    """``{"at"}``: when a user last asked the goal to be retried (None in ``at`` if never)."""
    return tx.one("SELECT MAX(at) AS at FROM events WHERE goal_id = ? AND kind = 'goal.retried'", (goal_id,))


def newest_finished_runs(tx, goal_id: str, limit: int) -> list[Row]:
    """The outcome, opening and finishing times of the goal's ``limit`` newest finished runs, newest first."""
    return tx.query("SELECT outcome, opened_at, finished_at FROM runs WHERE goal_id = ? AND status = 'finished'"
                    " ORDER BY opened_at DESC, id DESC LIMIT ?", (goal_id, limit))


def newest_event_row(tx) -> int:
    """The id of the registry's newest event row (0 when empty)."""
    return tx.one("SELECT MAX(id) AS n FROM events")["n"] or 0


def goals_changed_between(tx, after: int, upto: int) -> list[str]:
    """The goals with event rows after ``after`` up to ``upto``."""
    rows = tx.query("SELECT DISTINCT goal_id FROM events WHERE id > ? AND id <= ?", (after, upto))
    return [r["goal_id"] for r in rows]

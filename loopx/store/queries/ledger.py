"""The ledger's statements: events appended, read and replayed, a goal's current state read whole,
the operation ids a retried write finds, the registry's id, and the steps a journal replays
(:mod:`loopx.ledger.log`, :mod:`loopx.ledger.registry`, :mod:`loopx.ledger.keys`, :mod:`loopx.ledger.step_journal`).

On every write's and every should-run's path: nothing is imported here.
"""

from __future__ import annotations


def prev_hash(tx, goal_id: str, seq: int) -> dict | None:
    """The hash of the goal's newest event before ``seq`` (``{"hash"}``), or None."""
    return tx.one("SELECT hash FROM events WHERE goal_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1", (goal_id, seq))


def insert_event(tx, values: tuple) -> dict:
    """Append one chained event (``goal_id, seq, at, actor, kind, body, operation_id, prev_hash,
    hash``); returns ``{"id"}``, its global id."""
    return tx.one(
        "INSERT INTO events (goal_id, seq, at, actor, kind, body, operation_id, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        values,
    )


def insert_replayed_event(tx, values: tuple) -> None:
    """Write one event with its original global id into a scratch registry (``id, goal_id, seq,
    at, actor, kind, body, operation_id``)."""
    tx.execute(
        "INSERT INTO events (id, goal_id, seq, at, actor, kind, body, operation_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        values,
    )


def events_after(tx, goal_id: str, after: int, limit: int | None) -> list[dict]:
    """The goal's events with ``seq > after``, oldest first, at most ``limit`` (None: all)."""
    sql = "SELECT * FROM events WHERE goal_id = ? AND seq > ? ORDER BY seq"
    params: list = [goal_id, after]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return tx.query(sql, params)


def events_page(tx, goal_id: str, after: int, size: int, columns: str = "*") -> list[dict]:
    """At most ``size`` of the goal's events (``columns``) with ``seq > after``, oldest first."""
    return tx.query(f"SELECT {columns} FROM events WHERE goal_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                    (goal_id, after, size))


def goal_rows(tx, table: str, column: str, goal_id: str) -> list[dict]:
    """Every row of the state table ``table`` whose ``column`` is the goal (unordered)."""
    return tx.query(f"SELECT * FROM {table} WHERE {column} = ?", (goal_id,))


def record_operation(tx, values: tuple) -> None:
    """Record a write's operation id and its result (``id, goal_id, actor, request, result, at``)."""
    tx.execute(
        "INSERT INTO operations (id, goal_id, actor, request, result, at) VALUES (?, ?, ?, ?, ?, ?)",
        values,
    )


def operation(tx, operation_id: str) -> dict | None:
    """The request hash and result recorded for ``operation_id`` (``{"request", "result"}``), or None."""
    return tx.one("SELECT request, result FROM operations WHERE id = ?", (operation_id,))


def meta_value(tx, key: str) -> dict | None:
    """The ``meta`` row ``key`` (``{"value"}``), or None."""
    return tx.one("SELECT value FROM meta WHERE key = ?", (key,))


def step_evidence(tx, run_id: str | None, since: str) -> list[dict]:
    """The ``data`` of the core's command evidence of run ``run_id`` created at ``since`` or later."""
    return tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'command' AND actor = 'core'"
                    " AND created_at >= ?", (run_id, since))


def run_status(tx, run_id: str) -> dict | None:
    """The run's ``{"status"}``, or None."""
    return tx.one("SELECT status FROM runs WHERE id = ?", (run_id,))


def set_meta(tx, key: str, value: str) -> None:
    """Set the ``meta`` row ``key`` to ``value``."""
    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
               (key, value))


def ledger_goals(tx) -> list[dict]:
    """Every goal with events (``{"goal_id"}``)."""
    return tx.query("SELECT DISTINCT goal_id FROM events")

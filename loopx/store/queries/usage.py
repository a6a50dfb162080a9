"""What a quota decision reads and charges: the usage counters (``goal_usage``), a run's own
charges, the gates and actions the contract fingerprint covers, and should-run's reads of a goal
(:func:`loopx.views.inputs.gather`: its row with the cheap damage probe beside it, its side tables in
one statement). On ``quota should-run``'s path: nothing is imported here.
"""

from __future__ import annotations

from typing import Any, Callable

Row = dict[str, Any]

#: Whether the cheap detectors (a revision that is not the ledger's last event, a dependency on a
#: missing todo, a pending gate on a missing todo) would find anything, as columns of a select over
#: ``goals g`` (the same conditions, each an indexed lookup): should-run reads them with the goal
#: (:func:`goal_with_probe`) for its hooks' veto; :func:`loopx.store.queries.damage.cheap_probe` alone.
PROBE_COLUMNS = (
    " (SELECT MAX(seq) FROM events WHERE goal_id = g.id) AS last,"
    " EXISTS (SELECT 1 FROM todo_deps d WHERE d.goal_id = g.id AND NOT EXISTS"
    "  (SELECT 1 FROM todos t WHERE t.id = d.dep_id AND t.goal_id = d.goal_id)) AS deps_missing,"
    " EXISTS (SELECT 1 FROM gates ga WHERE ga.goal_id = g.id AND ga.status = 'pending' AND ga.blocks LIKE 'todo:%'"
    "  AND NOT EXISTS (SELECT 1 FROM todos t WHERE t.goal_id = g.id AND t.id = substr(ga.blocks, 6))) AS gates_dangling"
)

#: The counters of a goal, in the order ``goal_usage`` holds them.
COLUMNS = "turns, tokens, cost_micros, wall_us, last_opened"


def count_run_opened(tx, goal_id: str, at: str) -> None:
    """One more turn for ``goal_id`` (its first makes the row); ``last_opened`` moves up to ``at``."""
    tx.execute("INSERT INTO goal_usage (goal_id, turns, tokens, cost_micros, wall_us, last_opened)"
               " VALUES (?, 1, 0, 0, 0, ?) ON CONFLICT (goal_id) DO UPDATE SET turns = goal_usage.turns + 1,"
               " last_opened = CASE WHEN goal_usage.last_opened IS NULL OR goal_usage.last_opened < excluded.last_opened"
               " THEN excluded.last_opened ELSE goal_usage.last_opened END", (goal_id, at))


def add_charges(tx, goal_id: str, tokens: int, cost_micros: int, wall_us: int) -> None:
    """Add to ``goal_id``'s token, cost and wall-time counters."""
    tx.execute("UPDATE goal_usage SET tokens = tokens + ?, cost_micros = cost_micros + ?, wall_us = wall_us + ?"
               " WHERE goal_id = ?", (tokens, cost_micros, wall_us, goal_id))


def counters(tx, goal_id: str) -> Row | None:
    """``goal_id``'s counters row, or None before its first run."""
    return tx.one(f"SELECT {COLUMNS} FROM goal_usage WHERE goal_id = ?", (goal_id,))


def counters_of(tx, goal_ids: list[str]) -> list[Row]:
    """The counters rows (with ``goal_id``) of the goals among ``goal_ids`` that have one."""
    marks = ", ".join("?" for _ in goal_ids)
    return tx.query(f"SELECT goal_id, {COLUMNS} FROM goal_usage WHERE goal_id IN ({marks})", list(goal_ids))


def run_charges(tx, goal_id: str | None = None) -> list[Row]:
    """What every run (of one goal, or of all) charges: its times, tokens and cost, with its goal."""
    scope, params = ("", ()) if goal_id is None else (" WHERE goal_id = ?", (goal_id,))
    return tx.query("SELECT goal_id, opened_at, expires_at, finished_at, tokens, cost FROM runs" + scope, params)


def replace_counters(tx, rows: list[tuple]) -> None:
    """Every goal's counters from scratch: ``rows`` as ``(goal_id, turns, tokens, cost_micros, wall_us,
    last_opened)``."""
    tx.execute("DELETE FROM goal_usage")
    for start in range(0, len(rows), 10_000):
        tx.executemany("INSERT INTO goal_usage (goal_id, turns, tokens, cost_micros, wall_us, last_opened)"
                       " VALUES (?, ?, ?, ?, ?, ?)", rows[start:start + 10_000])


def run_charged(tx, run_id: str, goal_id: str) -> Row | None:
    """The times, tokens and cost of ``goal_id``'s run ``run_id`` (None if it has no such run)."""
    return tx.one("SELECT opened_at, expires_at, finished_at, tokens, cost FROM runs WHERE id = ? AND goal_id = ?",
                  (run_id, goal_id))


def fingerprinted_gates(tx, goal_id: str) -> list[Row]:
    """``goal_id``'s gates as the fingerprint covers them (id, status, blocks), by id."""
    return tx.query("SELECT id, status, blocks FROM gates WHERE goal_id = ? ORDER BY id", (goal_id,))


def fingerprinted_actions(tx, goal_id: str) -> list[Row]:
    """``goal_id``'s actions as the fingerprint covers them (name, argv, gate_id), by name."""
    return tx.query("SELECT name, argv, gate_id FROM actions WHERE goal_id = ? ORDER BY name", (goal_id,))


def last_opened_but(tx, goal_id: str, run_id: str) -> str | None:
    """When ``goal_id``'s latest run other than ``run_id`` was opened (None if none)."""
    row = tx.one("SELECT MAX(opened_at) AS at FROM runs WHERE goal_id = ? AND id <> ?", (goal_id, run_id))
    return row["at"]


def goal_with_probe(tx, goal_id: str) -> Row | None:
    """The goal's whole row with the probe's columns beside it (None if there is no such goal)."""
    return tx.one(f"SELECT g.*,{PROBE_COLUMNS} FROM goals g WHERE g.id = ?", (goal_id,))


def side_rows(tx, goal_id: str, tables: tuple, row_text: Callable[[str, str], str]) -> list[Row]:
    """``goal_id``'s rows of ``tables`` (of ``runs`` the open ones) in one statement, each as
    ``{"tbl", "txt"}``: its table and its JSON text as the database prints it (``row_text(table,
    alias)``: that expression). The statement is made once per engine and set of tables."""
    key = (tx.dialect, tables)
    sql = _SIDE_SQL.get(key)
    if sql is None:
        sql = _SIDE_SQL[key] = " UNION ALL ".join(
            f"SELECT '{t}' AS tbl, {row_text(t, 'x')} AS txt FROM {t} x WHERE x.goal_id = ?"
            + (" AND x.status = 'open'" if t == "runs" else "")
            for t in tables)
    return tx.query(sql, (goal_id,) * len(tables))


_SIDE_SQL: dict[tuple, str] = {}

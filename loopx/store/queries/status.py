"""What the status views read (``loopx status``, the dashboard, ``status --all``, id completion):
the attention summary's lanes, the rows of a page of goals in batches of ids, one goal in full,
its history. None of these writes.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]

_CHUNK = 500  # ids per IN (...) list: far below every backend's parameter limit


def _in_chunks(tx, sql: str, ids: list[str], extra: tuple = ()) -> list[Row]:
    """Run ``sql`` (with one ``{ids}`` placeholder list) over ``ids`` in chunks."""
    rows: list[Row] = []
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        rows.extend(tx.query(sql.format(ids=marks), (*chunk, *extra)))
    return rows


# --- the registry and the attention summary ---


def registry_revision(tx) -> int:
    """The id of the registry's newest event (0 when empty): a primary-key max."""
    row = tx.one("SELECT max(id) AS m FROM events")
    return int(row["m"] or 0) if row else 0


def goal_revision(tx, goal_id: str) -> int | None:
    """One goal's revision (None when there is no such goal)."""
    row = tx.one("SELECT revision FROM goals WHERE id = ?", (goal_id,))
    return None if row is None else row["revision"]


def goal_count(tx) -> int:
    """How many goals the registry holds."""
    return tx.one("SELECT COUNT(*) AS n FROM goals")["n"]


def summaries_expired_by(tx, at: str) -> list[Row]:
    """``(goal_id, created_seq, lane)`` of the summaries whose open run expired by ``at``."""
    return tx.query("SELECT goal_id, created_seq, lane FROM goal_summary WHERE run_expires <= ?", (at,))


def open_attention_goals(tx) -> list[str]:
    """The open goals of the attention lane."""
    return [r["goal_id"] for r in tx.query("SELECT goal_id FROM goal_summary WHERE lane = 2 AND status = 'open'")]


def attention_page(tx, bound: int | None, n: int) -> list[Row]:
    """Up to ``n`` ``(goal_id, created_seq)`` of the attention lane newer than ``bound``, oldest first."""
    sql = "SELECT goal_id, created_seq FROM goal_summary WHERE lane = 2"
    params: list = []
    if bound is not None:
        sql += " AND created_seq > ?"
        params.append(bound)
    return tx.query(sql + " ORDER BY created_seq LIMIT ?", (*params, n))


def quiet_page(tx, include_closed: bool, bound: int | None, n: int) -> list[Row]:
    """Up to ``n`` ``(goal_id, created_seq)`` outside the attention lane (the closed lane too with
    ``include_closed``) older than ``bound``, newest first."""
    lanes = "lane <> 2" if include_closed else "lane = 1"
    sql = f"SELECT goal_id, created_seq FROM goal_summary WHERE {lanes}"
    params: list = []
    if bound is not None:
        sql += " AND created_seq < ?"
        params.append(bound)
    return tx.query(sql + " ORDER BY created_seq DESC LIMIT ?", (*params, n))


# --- a page of goals, in batches of ids ---


def summary_rows(tx, goal_ids: list[str]) -> list[Row]:
    """``(goal_id, lane, attention, run_expires)`` of the goals' summaries."""
    return _in_chunks(tx, "SELECT goal_id, lane, attention, run_expires FROM goal_summary"
                          " WHERE goal_id IN ({ids})", goal_ids)


def goal_rows(tx, goal_ids: list[str]) -> list[Row]:
    """The goals' rows."""
    return _in_chunks(tx, "SELECT * FROM goals WHERE id IN ({ids})", goal_ids)


def todo_counts(tx, goal_ids: list[str]) -> list[Row]:
    """``(goal_id, status, n)``: how many todos of each status the goals have."""
    return _in_chunks(tx, "SELECT goal_id, status, count(*) AS n FROM todos WHERE goal_id IN ({ids})"
                          " GROUP BY goal_id, status", goal_ids)


def pending_gate_counts(tx, goal_ids: list[str]) -> list[Row]:
    """``(goal_id, n)``: how many pending gates the goals have (those with any)."""
    return _in_chunks(tx, "SELECT goal_id, count(*) AS n FROM gates WHERE goal_id IN ({ids})"
                          " AND status = 'pending' GROUP BY goal_id", goal_ids)


def usage_rows(tx, goal_ids: list[str]) -> list[Row]:
    """The usage counters rows of the goals that have one."""
    sql = "SELECT goal_id, turns, tokens, cost_micros, wall_us, last_opened FROM goal_usage WHERE goal_id IN ({ids})"
    return _in_chunks(tx, sql, list(goal_ids))


def newest_runs(tx, goal_ids: list[str], status: str | None = None) -> list[Row]:
    """The runs (optionally of one status) opened last of each goal (ties: every one of them)."""
    cond = " AND r2.status = ?" if status else ""
    outer = " AND r.status = ?" if status else ""
    extra = (status, status) if status else ()
    return _in_chunks(
        tx,
        "SELECT * FROM runs r WHERE r.goal_id IN ({ids})" + outer + " AND r.opened_at ="
        " (SELECT max(r2.opened_at) FROM runs r2 WHERE r2.goal_id = r.goal_id" + cond + ")",
        goal_ids,
        extra,
    )


# --- one goal ---


def goal_row(tx, goal_id: str) -> Row | None:
    """The goal's row (None when there is no such goal)."""
    return tx.one("SELECT * FROM goals WHERE id = ?", (goal_id,))


def goal_exists(tx, goal_id: str) -> bool:
    """Whether the registry has the goal."""
    return tx.one("SELECT id FROM goals WHERE id = ?", (goal_id,)) is not None


def recent_runs(tx, goal_id: str, limit: int) -> list[Row]:
    """The goal's ``limit`` newest runs, newest first."""
    return tx.query("SELECT * FROM runs WHERE goal_id = ? ORDER BY opened_at DESC, id DESC LIMIT ?",
                    (goal_id, limit))


def recent_evidence(tx, goal_id: str, limit: int) -> list[Row]:
    """The goal's ``limit`` newest evidence rows, newest first."""
    return tx.query("SELECT * FROM evidence WHERE goal_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
                    (goal_id, limit))


def recent_rewards(tx, goal_id: str, limit: int) -> list[Row]:
    """The goal's ``limit`` newest rewards, newest first."""
    return tx.query("SELECT * FROM rewards WHERE goal_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
                    (goal_id, limit))


def goal_totals(tx, goal_id: str) -> Row:
    """``{"runs", "evidence", "rewards", "mean"}``: the goal's counts and its mean reward."""
    return tx.one(
        "SELECT (SELECT COUNT(*) FROM runs WHERE goal_id = ?) AS runs,"
        " (SELECT COUNT(*) FROM evidence WHERE goal_id = ?) AS evidence,"
        " (SELECT COUNT(*) FROM rewards WHERE goal_id = ?) AS rewards,"
        " (SELECT AVG(score) FROM rewards WHERE goal_id = ?) AS mean",
        (goal_id,) * 4,
    )


def action_rows(tx, goal_id: str) -> list[Row]:
    """The goal's actions, by name."""
    return tx.query("SELECT * FROM actions WHERE goal_id = ? ORDER BY name", (goal_id,))


# --- a goal's history ---


def history_runs(tx, goal_id: str, limit: int) -> list[Row]:
    """The goal's ``limit`` newest runs (what the history shows of them), newest first."""
    return tx.query(
        "SELECT id, agent, status, opened_at, expires_at, finished_at, outcome, tokens, cost FROM runs"
        " WHERE goal_id = ? ORDER BY opened_at DESC, id DESC LIMIT ?", (goal_id, limit))


def evidence_counts(tx, run_ids: list[str]) -> list[Row]:
    """``(run_id, n)``: how much evidence each of ``run_ids`` has (those with any)."""
    rows: list[Row] = []
    for start in range(0, len(run_ids), _CHUNK):
        chunk = run_ids[start:start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        rows.extend(tx.query(f"SELECT run_id, count(*) AS n FROM evidence WHERE run_id IN ({marks}) GROUP BY run_id",
                             chunk))
    return rows


def history_rewards(tx, goal_id: str, limit: int) -> list[Row]:
    """The goal's ``limit`` newest rewards (id, run_id, score, created_at), newest first."""
    return tx.query("SELECT id, run_id, score, created_at FROM rewards WHERE goal_id = ?"
                    " ORDER BY created_at DESC, id DESC LIMIT ?", (goal_id, limit))


def newest_contract(tx, goal_id: str) -> Row | None:
    """The goal's newest filed contract (id, run_id, issued_at, expires_at, document), or None."""
    return tx.one("SELECT id, run_id, issued_at, expires_at, document FROM contracts WHERE goal_id = ?"
                  " ORDER BY issued_at DESC, id DESC LIMIT 1", (goal_id,))


# --- status --all ---


def all_goal_rows(tx) -> list[Row]:
    """Every goal's row, oldest first."""
    return tx.query("SELECT * FROM goals ORDER BY created_seq")


def runs_by_status(tx, goal_id: str) -> list[Row]:
    """``(k, n)``: how many of the goal's runs are in each status."""
    return tx.query("SELECT status AS k, COUNT(*) AS n FROM runs WHERE goal_id = ? GROUP BY status", (goal_id,))


def open_runs_expired(tx, goal_id: str, at: str) -> int:
    """How many of the goal's runs are still open past their expiry at ``at``."""
    return tx.one("SELECT COUNT(*) AS n FROM runs WHERE goal_id = ? AND status = 'open' AND expires_at <= ?",
                  (goal_id, at))["n"]


def finished_by_outcome(tx, goal_id: str) -> list[Row]:
    """``(k, n)``: how many of the goal's finished runs reported each outcome."""
    return tx.query("SELECT outcome AS k, COUNT(*) AS n FROM runs WHERE goal_id = ?"
                    " AND status = 'finished' AND outcome IS NOT NULL GROUP BY outcome", (goal_id,))


def evidence_by_kind(tx, goal_id: str) -> list[Row]:
    """``(k, n)``: how much of the goal's evidence is of each kind."""
    return tx.query("SELECT kind AS k, COUNT(*) AS n FROM evidence WHERE goal_id = ? GROUP BY kind", (goal_id,))


def reward_count_mean(tx, goal_id: str) -> Row:
    """``{"n", "mean"}`` of the goal's rewards."""
    return tx.one("SELECT COUNT(*) AS n, AVG(score) AS mean FROM rewards WHERE goal_id = ?", (goal_id,))


def held_todo_ids(tx, goal_id: str, now: str) -> list[Row]:
    """The ids of the goal's open todos a claim holds at ``now`` (not free under the one readiness
    rule, :func:`loopx.store.queries.projections.free_sql`, asked for no agent)."""
    from loopx.store.queries.projections import free_params, free_sql

    return tx.query(f"SELECT t.id FROM todos t WHERE t.goal_id = ? AND t.status = 'open' AND NOT {free_sql('t', None)}",
                    (goal_id, *free_params(None, now)))


# --- id completion ---


def ids_in_range(tx, table: str, prefix: str, limit: int, goal_id: str | None = None) -> list[str]:
    """Ids of ``table`` starting with ``prefix`` (of one goal's rows when given), at most ``limit``, in order."""
    # Every character of an id sorts below '~', so [prefix, prefix + '~') is exactly the prefix.
    sql = f"SELECT id FROM {table} WHERE id >= ? AND id < ?"
    params: list = [prefix, prefix + "~"]
    if goal_id is not None:
        sql += " AND goal_id = ?"
        params.append(goal_id)
    sql += f" ORDER BY id LIMIT {int(limit)}"
    return [row["id"] for row in tx.query(sql, params)]

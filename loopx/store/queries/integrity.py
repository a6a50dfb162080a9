"""Tamper evidence's statements: a goal's chain head and newest events, the seal, the per-row MACs
and the rows a should-run decision reads (:mod:`loopx.ledger.integrity`, :mod:`loopx.ledger.integrity_hash`,
:mod:`loopx.ledger.state_macs`), and the rollback anchor's own SQLite file (:mod:`loopx.ledger.anchor`).

On every write's and every should-run's path (so the anchor's statements are here too, not in a
module of their own): nothing is imported here but the dialect, loaded already.
"""

from __future__ import annotations

from typing import Callable

from loopx.store.dialect import of as dialect_of

# --- the chain and its head (loopx.ledger.integrity) ---


def last_event(tx, goal_id: str) -> dict | None:
    """The goal's newest ``events`` row (seq and hash), or None."""
    return tx.one("SELECT seq, hash FROM events WHERE goal_id = ? ORDER BY seq DESC LIMIT 1", (goal_id,))


def head(tx, goal_id: str) -> dict | None:
    """The goal's ``goal_heads`` row, or None."""
    return tx.one("SELECT goal_id, seq, head_hash, state_digest FROM goal_heads WHERE goal_id = ?", (goal_id,))


def last_and_head_seq(tx, goal_id: str) -> dict:
    """The goal's newest event (``seq``, ``hash``: None without one) and its head's ``head_seq``."""
    return tx.one("SELECT e.seq, e.hash, (SELECT seq FROM goal_heads WHERE goal_id = ?) AS head_seq"
                  " FROM (SELECT 1 AS one) o LEFT JOIN"
                  " (SELECT seq, hash FROM events WHERE goal_id = ? ORDER BY seq DESC LIMIT 1) e ON 1 = 1",
                  (goal_id, goal_id))


def record_head(tx, goal_id: str, seq: int, head_hash: str, digest: str) -> None:
    """Record (or move) the goal's chain head and state digest."""
    tx.execute(
        "INSERT INTO goal_heads (goal_id, seq, head_hash, state_digest) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (goal_id) DO UPDATE SET seq = excluded.seq, head_hash = excluded.head_hash,"
        " state_digest = excluded.state_digest",
        (goal_id, seq, head_hash, digest),
    )


def head_and_window(tx, goal_id: str, window: int, *, dirty: bool, guard: tuple | None) -> list[dict]:
    """One statement: the recorded head (``h_seq``, ``h_hash``, ``h_digest``), ``h_dirty`` (with
    ``dirty``: whether a row of the goal changed outside a LoopX transaction, else 0), the newest
    ``window`` events (one per row, with the ``events`` columns), and with ``guard`` - ``(table of
    changed events, tables the mark covers, meta key of the mark)`` - ``h_changes``, ``h_defs``
    and ``h_mark`` (:mod:`loopx.ledger.history_guard`)."""
    dirty_sql = ("CASE WHEN EXISTS (SELECT 1 FROM state_dirty d WHERE d.goal_id = q.gid AND (d.old IS NULL"
                 " OR d.new IS NULL OR d.old <> d.new)) THEN 1 ELSE 0 END" if dirty else "0")
    guard_sql = ""
    if guard is not None:
        table, tables, mark_key = guard
        guard_sql = (f", (SELECT n FROM {table} c WHERE c.goal_id = q.gid) AS h_changes,"
                     f" {dialect_of(tx).trigger_definitions(tables)} AS h_defs,"
                     f" (SELECT value FROM meta WHERE key = '{mark_key}') AS h_mark")
    return tx.query(
        "SELECT h.seq AS h_seq, h.head_hash AS h_hash, h.state_digest AS h_digest,"
        f" {dirty_sql} AS h_dirty{guard_sql}, e.*"
        " FROM (SELECT CAST(? AS TEXT) AS gid) q LEFT JOIN goal_heads h ON h.goal_id = q.gid"
        " LEFT JOIN (SELECT * FROM events WHERE goal_id = ? ORDER BY seq DESC LIMIT ?) e ON 1 = 1",
        (goal_id, goal_id, window))


def event_at(tx, goal_id: str, seq: int) -> dict | None:
    """The goal's event ``seq`` (``{"seq", "hash"}``), or None."""
    return tx.one("SELECT seq, hash FROM events WHERE goal_id = ? AND seq = ?", (goal_id, seq))


def loss_notes(tx, goal_id: str, kinds: tuple) -> list[dict]:
    """The goal's events of the two ``kinds`` that record loss, oldest first."""
    return tx.query("SELECT * FROM events WHERE goal_id = ? AND kind IN (?, ?) ORDER BY seq", (goal_id, *kinds))


def chain_page(tx, goal_id: str, after: int) -> list[dict]:
    """The next 500 of the goal's events after ``seq`` ``after``, oldest first (the full check)."""
    return tx.query("SELECT * FROM events WHERE goal_id = ? AND seq > ? ORDER BY seq LIMIT 500", (goal_id, after))


def newest_event_id(tx) -> int:
    """The registry's highest event id (0 for none)."""
    return tx.one("SELECT MAX(id) AS id FROM events")["id"] or 0


def events_from(tx, goal_id: str, from_seq: int) -> list[dict]:
    """The goal's events from ``from_seq`` on, oldest first."""
    return tx.query("SELECT * FROM events WHERE goal_id = ? AND seq >= ? ORDER BY seq", (goal_id, from_seq))


def rechain_events(tx, updates: list) -> None:
    """Set ``prev_hash`` and ``hash`` of events (``(prev_hash, hash, id)`` each)."""
    tx.executemany("UPDATE events SET prev_hash = ?, hash = ? WHERE id = ?", updates)


# --- the older whole-state digest (loopx.ledger.integrity_hash) ---


def open_runs(tx, goal_id: str) -> list[dict]:
    """The goal's open runs, whole rows."""
    return tx.query("SELECT * FROM runs WHERE goal_id = ? AND status = 'open'", (goal_id,))


def closed_runs_summary(tx, goal_id: str) -> dict:
    """What a decision reads of the goal's closed runs: ``n``, ``tokens``, ``cost``, the latest
    ``opened``, ``finished`` and ``expires``."""
    return tx.one("SELECT COUNT(*) AS n, COALESCE(SUM(tokens), 0) AS tokens, COALESCE(SUM(cost), 0) AS cost,"
                  " MAX(opened_at) AS opened, MAX(finished_at) AS finished, MAX(expires_at) AS expires"
                  " FROM runs WHERE goal_id = ? AND status <> 'open'", (goal_id,))


def contracts(tx, ids: tuple) -> list[dict]:
    """The contracts ``ids`` (at least one), by id."""
    marks = ", ".join("?" for _ in ids)
    return tx.query(f"SELECT id, run_id, fingerprint, issued_at, expires_at, document FROM contracts"
                    f" WHERE id IN ({marks}) ORDER BY id", ids)


def goal_tuples(tx, table: str, column: str, goal_id: str) -> tuple[list[str], list[tuple]]:
    """Column names and plain row tuples of the rows of ``table`` whose ``column`` is the goal
    (through the store's ``tuples`` when it has one)."""
    sql, params = f"SELECT * FROM {table} WHERE {column} = ?", (goal_id,)
    fast = getattr(tx, "tuples", None)
    if fast is not None:
        return fast(sql, params)
    rows = tx.query(sql, params)
    names = list(rows[0]) if rows else []
    return names, [tuple(r[n] for n in names) for r in rows]


# --- the per-row MACs (loopx.ledger.state_macs) ---


def take_dirty(tx, goal_id: str) -> list[dict]:
    """Take the goal's changed rows out of ``state_dirty`` (``tbl``, ``k``, ``old``, ``new`` each)."""
    return tx.query("DELETE FROM state_dirty WHERE goal_id = ? RETURNING tbl, k, old, new", (goal_id,))


def upsert_macs(tx, rows: list) -> None:
    """Set the MACs of ``rows`` (``(goal_id, tbl, k, mac)`` each, at most 500) in one statement."""
    tx.execute("INSERT INTO state_macs (goal_id, tbl, k, mac) VALUES " + ", ".join(["(?, ?, ?, ?)"] * len(rows))
               + " ON CONFLICT (goal_id, tbl, k) DO UPDATE SET mac = excluded.mac",
               tuple(v for row in rows for v in row))


def delete_macs(tx, keys: list) -> None:
    """Forget the MACs of rows deleted (``(goal_id, tbl, k)`` each)."""
    tx.executemany("DELETE FROM state_macs WHERE goal_id = ? AND tbl = ? AND k = ?", keys)


def changed_events(tx, table: str, goal_id: str) -> dict | None:
    """The goal's row (``{"n"}``) in ``table``, the count of its changed events, or None."""
    return tx.one(f"SELECT n FROM {table} WHERE goal_id = ?", (goal_id,))


def row_texts(tx, table: str, column: str, key: str, text: str, goal_id: str) -> list[dict]:
    """Every row of ``table`` whose ``column`` is the goal, as ``k`` (the SQL expression ``key``
    of alias ``t``) and ``txt`` (the expression ``text``)."""
    return tx.query(f"SELECT {key} AS k, {text} AS txt FROM {table} t WHERE t.{column} = ?", (goal_id,))


def replace_macs(tx, goal_id: str, macs: list) -> None:
    """Replace every MAC of the goal with ``macs`` (``(goal_id, tbl, k, mac)`` each) and empty its
    ``state_dirty``."""
    tx.execute("DELETE FROM state_macs WHERE goal_id = ?", (goal_id,))
    tx.execute("DELETE FROM state_dirty WHERE goal_id = ?", (goal_id,))
    for start in range(0, len(macs), 5000):
        tx.executemany("INSERT INTO state_macs (goal_id, tbl, k, mac) VALUES (?, ?, ?, ?)", macs[start:start + 5000])


def turn_rows_sql(dialect: str, key: Callable[[str, str], str], text: Callable[[str, str], str],
                  column: Callable[[str], str], free: str) -> str:
    """One statement: every row a should-run decision reads, with its stored MAC - the goal, its
    gates and actions, its open runs and their contracts, its usage counters, and the first rows
    of the ready page (``free``: the SQL condition on a todo ``t2`` that it is free to take).
    ``key(table, alias)``/``text(table, alias)``: the SQL of a row's key and JSON text;
    ``column(table)``: the column holding the goal."""

    def part(table: str, where: str, source: str | None = None) -> str:
        return (f"SELECT '{table}' AS tbl, {key(table, 't')} AS k, {text(table, 't')} AS txt,"
                f" m.mac AS mac FROM {source or table + ' t'} LEFT JOIN state_macs m ON m.goal_id = t.{column(table)}"
                f" AND m.tbl = '{table}' AND m.k = {key(table, 't')} WHERE {where}")

    join = dialect_of(dialect).page_join  # the page first
    page = ("SELECT r2.todo_id FROM todo_ready r2 JOIN todos t2 ON t2.id = r2.todo_id WHERE r2.goal_id = ?"
            f" AND {free} ORDER BY r2.priority, r2.created_seq LIMIT ?")
    return " UNION ALL ".join([
        part("goals", "t.id = ?"),
        part("gates", "t.goal_id = ?"),
        part("actions", "t.goal_id = ?"),
        part("runs", "t.goal_id = ? AND t.status = 'open'"),
        part("contracts", "t.id IN (SELECT contract_id FROM runs WHERE goal_id = ? AND status = 'open')"),
        part("goal_usage", "t.goal_id = ?"),
        # The page drives (a join from it, not a filter on the goal's rows: the cost is the page).
        part("todo_ready", "t.goal_id = ?", f"({page}) p1 {join} todo_ready t ON t.todo_id = p1.todo_id"),
        part("todos", "t.goal_id = ?", f"({page}) p2 {join} todos t ON t.id = p2.todo_id"),
    ])


# --- the rollback anchor: its own SQLite file, through a sqlite3 connection (loopx.ledger.anchor) ---

#: The anchor file's tables.
ANCHOR_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS heads (goal_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS generation (one INTEGER PRIMARY KEY CHECK (one = 0), event_id INTEGER NOT NULL)")


def anchor_open(conn, *, create: bool) -> None:
    """Set up a connection to an anchor file (``create``: its tables too, in WAL mode)."""
    conn.execute("PRAGMA busy_timeout = 30000")
    if create:
        for sql in ANCHOR_SCHEMA:
            conn.execute(sql)
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")  # a lost update leaves the anchor behind: accepted


def anchor_autocheckpoint(conn, pages: int) -> None:
    """Let the anchor's WAL grow to ``pages`` pages before SQLite checkpoints it by itself."""
    conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")


def anchor_record(conn, goal_id: str, seq: int, head_hash: str, event_id: int) -> None:
    """Move the goal's anchored head and the generation forward (never backward), one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO heads (goal_id, seq, hash) VALUES (?, ?, ?) ON CONFLICT (goal_id) DO UPDATE"
                     " SET seq = excluded.seq, hash = excluded.hash WHERE excluded.seq > heads.seq",
                     (goal_id, seq, head_hash))
        conn.execute("INSERT INTO generation (one, event_id) VALUES (0, ?) ON CONFLICT (one) DO UPDATE"
                     " SET event_id = excluded.event_id WHERE excluded.event_id > generation.event_id",
                     (event_id,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def anchor_head(conn, goal_id: str) -> tuple | None:
    """The goal's anchored ``(seq, hash)``, or None."""
    return conn.execute("SELECT seq, hash FROM heads WHERE goal_id = ?", (goal_id,)).fetchone()


def anchor_generation(conn) -> tuple | None:
    """The anchored generation ``(event_id,)``, or None."""
    return conn.execute("SELECT event_id FROM generation").fetchone()


def anchor_heads(conn) -> list[tuple]:
    """Every anchored ``(goal_id, seq, hash)``, by goal."""
    return conn.execute("SELECT goal_id, seq, hash FROM heads ORDER BY goal_id").fetchall()


def anchor_reset(conn, current: list[dict], generation: int) -> None:
    """Replace every anchored head with ``current`` and the generation, one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM heads")
        conn.execute("DELETE FROM generation")
        conn.executemany("INSERT INTO heads (goal_id, seq, hash) VALUES (?, ?, ?)",
                         [(r["goal_id"], r["seq"], r["hash"]) for r in current])
        conn.execute("INSERT INTO generation (one, event_id) VALUES (0, ?)", (generation,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise

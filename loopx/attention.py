"""The attention summary: one small row per goal that says where the overview ranks it.

``loopx status`` and ``GET /api/status`` show goals *attention first*, then the rest, newest
first. Finding the goals that need a human used to mean scanning every gate, run and budget
in the registry on every request. Instead, :func:`refresh` keeps a ``goal_summary`` row per goal
in the same transaction as every event that can change it (it is called from
:func:`loopx.ledger.apply`, so a replay rebuilds it like every other current-state table), and
the overview's first page is one indexed range query over it.

What is stored and what is computed when a page is read:

* **Stored** (depends only on the goal's rows): the goal's status, its creation order, the
  *lane* (0 closed, 1 nothing to see, 2 needs attention) and the attention codes that follow
  from the rows alone - ``gate_pending`` (a pending gate), ``budget_exhausted`` (usage from the
  runs against limits and grants), ``run_abandoned`` (the newest run was marked abandoned),
  ``run_failed`` (the newest finished run failed).
* **Stored, judged at read time**: ``run_expires``, the earliest expiry among the goal's open
  runs. An open run past its expiry is abandoned *now*, before anyone has marked it, so the
  page query adds ``run_abandoned`` to every goal with ``run_expires <= now`` (an indexed range:
  only goals with an open run have a value). No other attention code depends on the clock:
  budgets count only closed runs, and cadence and todo leases decide whether an agent may run,
  not whether a human must look.

``summary_counts`` holds the overview's totals (goals per status, goals in lane 2). Triggers on
``goal_summary`` keep it equal to the table whatever writes the table (a replay, a repair that
deletes and rebuilds a goal, a registry copy). On PostgreSQL the counters are spread over
:data:`SHARDS` rows per key, chosen by the writer's backend, so concurrent writers rarely touch
the same counter row; a read sums them.
"""

from __future__ import annotations

STATIC_CODES = ("gate_pending", "budget_exhausted", "run_abandoned", "run_failed")
LANE_CLOSED, LANE_QUIET, LANE_ATTENTION = 0, 1, 2
COUNT_KEYS = ("open", "paused", "closed", "attention")
SHARDS = 16  # PostgreSQL counter rows per key (SQLite uses shard 0 only: it has one writer)


def _row_for(tx, goal_id: str) -> tuple | None:
    """The summary row ``(status, created_seq, lane, attention, run_expires)`` the goal's rows give."""
    from loopx.status import attention_map

    goal = tx.one("SELECT status, created_seq FROM goals WHERE id = ?", (goal_id,))
    if goal is None:
        return None
    if goal["status"] == "closed":
        return (goal["status"], goal["created_seq"], LANE_CLOSED, "", None)
    # An empty "now" sorts before every timestamp: only the clock-free codes come back.
    codes = attention_map(tx, "", [goal_id]).get(goal_id, [])
    expiry = tx.one("SELECT min(expires_at) AS e FROM runs WHERE goal_id = ? AND status = 'open'", (goal_id,))
    return (goal["status"], goal["created_seq"], LANE_ATTENTION if codes else LANE_QUIET, ",".join(codes),
            expiry["e"] if expiry else None)


def refresh(tx, goal_id: str) -> None:
    """Bring ``goal_id``'s summary row up to date with its current rows (inside the writer's transaction).

    Writes only when something changed, so the counter triggers fire only on a real change.
    """
    want = _row_for(tx, goal_id)
    have = tx.one("SELECT status, created_seq, lane, attention, run_expires FROM goal_summary WHERE goal_id = ?",
                  (goal_id,))
    if want is None:
        if have is not None:
            tx.execute("DELETE FROM goal_summary WHERE goal_id = ?", (goal_id,))
        return
    if have is None:
        tx.execute("INSERT INTO goal_summary (goal_id, status, created_seq, lane, attention, run_expires)"
                   " VALUES (?, ?, ?, ?, ?, ?)", (goal_id, *want))
    elif tuple(have.values()) != want:
        tx.execute("UPDATE goal_summary SET status = ?, created_seq = ?, lane = ?, attention = ?, run_expires = ?"
                   " WHERE goal_id = ?", (*want, goal_id))


def rebuild_all(tx) -> int:
    """Fill ``goal_summary`` for every goal (the schema migration; also a repair tool). Returns the count.

    Set queries over the whole registry (the same rules as :func:`refresh`), then one batched
    insert: a migration of a million goals takes seconds, not one query per goal.
    """
    from loopx.status import attention_map

    tx.execute("DELETE FROM goal_summary")
    codes = attention_map(tx, "")
    expiries = {r["goal_id"]: r["e"] for r in tx.query(
        "SELECT goal_id, min(expires_at) AS e FROM runs WHERE status = 'open' GROUP BY goal_id")}
    rows = []
    for g in tx.query("SELECT id, status, created_seq FROM goals"):
        if g["status"] == "closed":
            rows.append((g["id"], g["status"], g["created_seq"], LANE_CLOSED, "", None))
        else:
            mine = codes.get(g["id"], [])
            rows.append((g["id"], g["status"], g["created_seq"], LANE_ATTENTION if mine else LANE_QUIET,
                         ",".join(mine), expiries.get(g["id"])))
    sql = "INSERT INTO goal_summary (goal_id, status, created_seq, lane, attention, run_expires) VALUES (?, ?, ?, ?, ?, ?)"
    many = getattr(tx, "executemany", None)
    for start in range(0, len(rows), 10_000):
        chunk = rows[start:start + 10_000]
        if many is not None:
            many(sql, chunk)
        else:
            for row in chunk:
                tx.execute(sql, row)
    return len(rows)


def counts(tx) -> dict:
    """``{"open", "paused", "closed", "attention"}``: the stored totals (attention without expired runs)."""
    out = {k: 0 for k in COUNT_KEYS}
    for r in tx.query("SELECT key, SUM(n) AS n FROM summary_counts GROUP BY key"):
        out[r["key"]] = int(r["n"] or 0)
    return out


# ------------------------------------------------------------------------------ schema (migration 3)

_TABLES = [
    """CREATE TABLE IF NOT EXISTS goal_summary (
        goal_id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        created_seq INTEGER NOT NULL,
        lane INTEGER NOT NULL,
        attention TEXT NOT NULL,
        run_expires TEXT)""",
    # The overview's pages: attention (lane 2) and the rest (lane 1), newest first.
    "CREATE INDEX IF NOT EXISTS goal_summary_by_lane ON goal_summary (lane, created_seq)",
    # --all: every lane but attention, newest first.
    "CREATE INDEX IF NOT EXISTS goal_summary_by_created ON goal_summary (created_seq)",
    # Goals whose open run has expired by now (the one clock-dependent attention code).
    "CREATE INDEX IF NOT EXISTS goal_summary_by_expiry ON goal_summary (run_expires)",
    """CREATE TABLE IF NOT EXISTS summary_counts (
        key TEXT NOT NULL,
        shard INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (key, shard))""",
]

_DEC = "UPDATE summary_counts SET n = n - 1 WHERE shard = {shard} AND (key = OLD.status OR (key = 'attention' AND OLD.lane = 2))"
_INC = "UPDATE summary_counts SET n = n + 1 WHERE shard = {shard} AND (key = NEW.status OR (key = 'attention' AND NEW.lane = 2))"

_SQLITE_TRIGGERS = [
    f"CREATE TRIGGER IF NOT EXISTS goal_summary_counted_insert AFTER INSERT ON goal_summary BEGIN"
    f" {_INC.format(shard=0)}; END",
    f"CREATE TRIGGER IF NOT EXISTS goal_summary_counted_delete AFTER DELETE ON goal_summary BEGIN"
    f" {_DEC.format(shard=0)}; END",
    f"CREATE TRIGGER IF NOT EXISTS goal_summary_counted_update AFTER UPDATE OF status, lane ON goal_summary"
    f" WHEN OLD.status <> NEW.status OR OLD.lane <> NEW.lane BEGIN"
    f" {_DEC.format(shard=0)}; {_INC.format(shard=0)}; END",
]

_PG_SHARD = f"(pg_backend_pid() % {SHARDS})"
_POSTGRES_TRIGGERS = [
    f"""CREATE OR REPLACE FUNCTION goal_summary_counted() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        IF TG_OP IN ('DELETE', 'UPDATE') THEN
            {_DEC.format(shard=_PG_SHARD)};
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            {_INC.format(shard=_PG_SHARD)};
        END IF;
        RETURN NULL;
    END $fn$""",
    "CREATE TRIGGER goal_summary_counted_rows AFTER INSERT OR DELETE ON goal_summary"
    " FOR EACH ROW EXECUTE FUNCTION goal_summary_counted()",
    "CREATE TRIGGER goal_summary_counted_update AFTER UPDATE OF status, lane ON goal_summary FOR EACH ROW"
    " WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lane IS DISTINCT FROM NEW.lane)"
    " EXECUTE FUNCTION goal_summary_counted()",
]


def _seed_counts(tx) -> None:
    shards = SHARDS if tx.dialect == "postgres" else 1
    for key in COUNT_KEYS:
        for shard in range(shards):
            tx.execute("INSERT INTO summary_counts (key, shard, n) VALUES (?, ?, 0)", (key, shard))


def migration() -> list:
    """Schema step 3: the tables, the counter triggers, then the summary of every existing goal."""
    return [*_TABLES, {"sqlite": _SQLITE_TRIGGERS, "postgres": _POSTGRES_TRIGGERS}, _seed_counts, rebuild_all]

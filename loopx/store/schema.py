"""The registry's tables, written once for every SQL backend.

``{autoid}`` and ``{real}`` are the only words that differ between dialects. Migrations are a
list: ``MIGRATIONS[n]`` takes a store from version ``n`` to ``n + 1``. Never edit a released
step; append a new one.
"""

from __future__ import annotations

DIALECT_WORDS = {
    "sqlite": {"autoid": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL"},
    "postgres": {"autoid": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "real": "DOUBLE PRECISION"},
}

# Every table of current state that belongs to a goal, with its key columns. A goal's state is
# exactly these rows; replaying its ledger must rebuild them byte for byte.
GOAL_TABLES = {
    "goals": ("id",),
    "gates": ("id",),
    "todos": ("id",),
    "actions": ("goal_id", "name"),
    "runs": ("id",),
    "contracts": ("id",),
    "evidence": ("id",),
    "rewards": ("id",),
    "capability_state": ("goal_id", "namespace", "key"),
    # Where the overview ranks the goal; kept by loopx.ledger.attention from the rows above.
    "goal_summary": ("goal_id",),
    # Quota usage counters, moved by the run events (loopx.ledger.usage_counts).
    "goal_usage": ("goal_id",),
    # The ready set's index: dependency edges and unblocked todos (loopx.ledger.todo_ready).
    "todo_deps": ("goal_id", "todo_id", "dep_id"),
    "todo_ready": ("goal_id", "todo_id"),
    # Where the goal's project is and the workspace LoopX made for it (loopx.domain.workspace).
    "goal_workspaces": ("goal_id",),
}

_V1 = [
    """CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS events (
        id {autoid},
        goal_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        operation_id TEXT,
        UNIQUE (goal_id, seq))""",
    """CREATE TABLE IF NOT EXISTS operations (
        id TEXT PRIMARY KEY,
        goal_id TEXT,
        actor TEXT NOT NULL,
        request TEXT NOT NULL,
        result TEXT NOT NULL,
        at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS goals (
        id TEXT PRIMARY KEY,
        created_seq INTEGER NOT NULL,
        title TEXT NOT NULL,
        description TEXT NOT NULL,
        status TEXT NOT NULL,
        status_reason TEXT,
        criteria TEXT NOT NULL,
        limits TEXT NOT NULL,
        grants TEXT NOT NULL,
        parallel_runs INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS goals_by_status ON goals (status, created_seq)",
    "CREATE INDEX IF NOT EXISTS goals_by_created ON goals (created_seq)",
    """CREATE TABLE IF NOT EXISTS gates (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        title TEXT NOT NULL,
        scope TEXT NOT NULL,
        blocks TEXT NOT NULL,
        status TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        created_at TEXT NOT NULL,
        decided_by TEXT,
        decided_at TEXT,
        comment TEXT)""",
    "CREATE INDEX IF NOT EXISTS gates_by_goal ON gates (goal_id, status)",
    """CREATE TABLE IF NOT EXISTS todos (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        created_seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        priority TEXT NOT NULL,
        depends_on TEXT NOT NULL,
        status TEXT NOT NULL,
        note TEXT,
        claim_agent TEXT,
        claim_run_id TEXT,
        claim_expires_at TEXT,
        epoch INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS todos_by_goal ON todos (goal_id, status)",
    """CREATE TABLE IF NOT EXISTS actions (
        goal_id TEXT NOT NULL,
        name TEXT NOT NULL,
        argv TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (goal_id, name))""",
    """CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        status TEXT NOT NULL,
        contract_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        opened_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT,
        tokens INTEGER NOT NULL,
        cost {real} NOT NULL,
        handoff TEXT)""",
    "CREATE INDEX IF NOT EXISTS runs_by_goal ON runs (goal_id, status, opened_at)",
    """CREATE TABLE IF NOT EXISTS contracts (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        run_id TEXT,
        fingerprint TEXT NOT NULL,
        issued_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        document TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS contracts_by_run ON contracts (run_id)",
    "CREATE INDEX IF NOT EXISTS contracts_by_goal ON contracts (goal_id)",
    """CREATE TABLE IF NOT EXISTS evidence (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        run_id TEXT,
        kind TEXT NOT NULL,
        summary TEXT NOT NULL,
        actor TEXT NOT NULL,
        created_at TEXT NOT NULL,
        data TEXT,
        file_path TEXT,
        file_sha256 TEXT)""",
    "CREATE INDEX IF NOT EXISTS evidence_by_goal ON evidence (goal_id, created_at)",
    "CREATE INDEX IF NOT EXISTS evidence_by_run ON evidence (run_id)",
    """CREATE TABLE IF NOT EXISTS rewards (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        score {real} NOT NULL,
        comment TEXT,
        author TEXT NOT NULL,
        created_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS rewards_by_goal ON rewards (goal_id, created_at)",
    "CREATE INDEX IF NOT EXISTS rewards_by_run ON rewards (run_id)",
    """CREATE TABLE IF NOT EXISTS capability_state (
        goal_id TEXT NOT NULL,
        namespace TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (goal_id, namespace, key))""",
]

# v2: an action may sit behind a gate (``action add --gate-id X``); it stays out of contracts until
# that gate is approved.
_V2 = [
    "ALTER TABLE actions ADD COLUMN gate_id TEXT",
]


# v3: the attention summary (``goal_summary`` and its counters, kept by ``loopx.ledger.attention``), so
# the overview's first page is one indexed query; its rows for existing goals are derived by
# ``loopx.ledger.attention.rebuild_all``. The store sits below the ledger, so data steps are named,
# not imported: ``Call`` resolves them when a migration runs.

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

_PG_SHARD = "(pg_backend_pid() % 16)"  # loopx.ledger.attention.SHARDS
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


class Call:
    """A migration step run as ``module.function(tx)``, imported only when a migration needs it."""

    def __init__(self, module: str, function: str):
        self.module, self.function = module, function

    def __call__(self, tx):
        import importlib

        return getattr(importlib.import_module(self.module), self.function)(tx)


_V3 = [*_TABLES, {"sqlite": _SQLITE_TRIGGERS, "postgres": _POSTGRES_TRIGGERS},
       Call("loopx.ledger.attention", "seed_counts"), Call("loopx.ledger.attention", "rebuild_all")]


# v4: tamper evidence (loopx/ledger/integrity.py). Each event carries its goal's hash chain; goal_heads
# keeps each goal's chain head and current-state digest. Existing ledgers are chained as they
# stand and every goal sealed. A later step that changes a state table's columns (what the
# digest covers) must end with the same Call, to re-seal.
_V4 = [
    "ALTER TABLE events ADD COLUMN prev_hash TEXT",
    "ALTER TABLE events ADD COLUMN hash TEXT",
    """CREATE TABLE IF NOT EXISTS goal_heads (
        goal_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        head_hash TEXT,
        state_digest TEXT NOT NULL)""",
    # Chains only: the digest now also covers v5's goal_usage, which does not exist yet here; v5
    # seals every goal (the same end state as sealing here did).
    Call("loopx.ledger.integrity_steps", "backfill_chains"),
]

# v5: quota usage in counters (loopx/ledger/usage_counts.py): one row per goal with runs, moved by the run
# events, so should-run reads one row instead of summing every run. Filled from the runs rows
# (integer counters: the same totals whatever order the runs are summed in); the counters are
# state the decision reads, so every goal whose digest still matches is re-sealed (one altered
# before the migration is sealed untrusted: loopx.ledger.integrity_steps.reseal_intact). Plus the indexes
# the contract's bounded queries use.
_V5 = [
    """CREATE TABLE IF NOT EXISTS goal_usage (
        goal_id TEXT PRIMARY KEY,
        turns BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        cost_micros BIGINT NOT NULL,
        wall_us BIGINT NOT NULL,
        last_opened TEXT)""",
    """CREATE TABLE IF NOT EXISTS todo_deps (
        goal_id TEXT NOT NULL,
        todo_id TEXT NOT NULL,
        dep_id TEXT NOT NULL,
        PRIMARY KEY (goal_id, todo_id, dep_id))""",
    # A todo done or reopened: the todos waiting on it.
    "CREATE INDEX IF NOT EXISTS todo_deps_by_dep ON todo_deps (goal_id, dep_id)",
    """CREATE TABLE IF NOT EXISTS todo_ready (
        goal_id TEXT NOT NULL,
        todo_id TEXT NOT NULL,
        priority TEXT NOT NULL,
        created_seq INTEGER NOT NULL,
        PRIMARY KEY (goal_id, todo_id))""",
    # The ready set in its order: a page is an index range.
    "CREATE INDEX IF NOT EXISTS todo_ready_in_order ON todo_ready (goal_id, priority, created_seq)",
    # Newest runs of a goal whatever their status (summary, stuck detection), the latest hand-off.
    "CREATE INDEX IF NOT EXISTS runs_by_goal_opened ON runs (goal_id, opened_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_by_goal_finished ON runs (goal_id, status, finished_at)",
    Call("loopx.ledger.usage_counts", "backfill"),
    Call("loopx.ledger.todo_ready", "backfill"),
    Call("loopx.ledger.integrity_steps", "reseal_intact"),
]

# v6: running for days (loopx/domain/supervision.py, loopx/worker.py, loopx/views/notify.py). None of these
# belong to a goal's ledger (they are not in GOAL_TABLES, the state digest or a registry copy):
# user settings, worker heartbeats, goal leases with fencing tokens, clock jumps seen, and the
# notifications sent. PostgreSQL workers are woken by the store's change notifications.
_V6 = [
    """CREATE TABLE IF NOT EXISTS settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        updated_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS workers (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        beat_at TEXT NOT NULL,
        goals TEXT NOT NULL,
        stopped_at TEXT,
        info TEXT)""",
    """CREATE TABLE IF NOT EXISTS goal_leases (
        goal_id TEXT PRIMARY KEY,
        worker_id TEXT NOT NULL,
        token INTEGER NOT NULL,
        expires_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS clock_jumps (
        id {autoid},
        worker_id TEXT NOT NULL,
        seen_at TEXT NOT NULL,
        jump_seconds {real} NOT NULL,
        detail TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS notifications (
        id {autoid},
        goal_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        dedupe_key TEXT NOT NULL,
        at TEXT NOT NULL,
        channel TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        detail TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS notifications_by_key ON notifications (dedupe_key, at)",
]

# v7: keyed integrity (loopx/ledger/keys.py, loopx/ledger/rekey.py). The registry gets a stable id in meta and a
# key outside it, in the user's config directory; every chain and digest is recomputed with the
# key (goals whose unkeyed chain already failed are sealed untrusted, so that stays visible).
_V7 = [Call("loopx.ledger.rekey", "key_registry")]

# v8: goals list the capabilities they use (loopx/domain/goals.py, docs/capabilities/README.md). The new
# column is goal state the digest covers, so the column is added by a step that reseals every goal
# whose digest matched just before (one altered outside the ledger stays untrusted). Then a goal
# in progress that a capability already keeps state for (an Issue-Fix goal) is recorded as using
# it, by a ledger event, so upgrading does not take its steps away.
_V8 = [Call("loopx.ledger.integrity_steps", "add_goal_capabilities"), Call("loopx.domain.goals", "adopt_capabilities")]

# v9: the state digest kept incrementally (loopx/ledger/state_macs.py, issue 25): one keyed MAC per state row
# in state_macs, and the rows each transaction changed recorded by triggers in state_dirty (empty
# outside a LoopX transaction). Every goal's MACs are computed from its rows - a goal whose recorded
# digest no longer matches them is sealed untrusted instead (loopx.ledger.integrity_steps.mac_all). A later step
# that adds a column to a table in state_macs.TABLES must add it there, re-create the SQLite
# triggers (state_macs.install) and end with the same Call.
_V9 = [
    """CREATE TABLE IF NOT EXISTS state_macs (
        goal_id TEXT NOT NULL,
        tbl TEXT NOT NULL,
        k TEXT NOT NULL,
        mac TEXT NOT NULL,
        PRIMARY KEY (goal_id, tbl, k))""",
    """CREATE TABLE IF NOT EXISTS state_dirty (
        goal_id TEXT NOT NULL,
        tbl TEXT NOT NULL,
        k TEXT NOT NULL,
        old TEXT,
        new TEXT,
        PRIMARY KEY (goal_id, tbl, k))""",
    Call("loopx.ledger.state_macs", "install"),
    Call("loopx.ledger.integrity_steps", "mac_all"),
]

# v10: the latest hand-off is one index seek (loopx/domain/runs.py, issue 25): a contract carries the
# newest finished run's hand-off, and without this index the read walked back over every finished
# run that left none (0.02 ms at 15 runs, 0.37 ms at 750: it grew with the goal's history).
_V10 = [
    "CREATE INDEX IF NOT EXISTS runs_with_handoff ON runs (goal_id, finished_at, id)"
    " WHERE status = 'finished' AND handoff IS NOT NULL",
]

# v11: every edit or deletion of a stored event seen by the next should-run (loopx/ledger/history_guard.py,
# issue 39): triggers count them per goal in event_changes (bound in the goal's keyed tag), and the
# definitions of every trigger are MACed into meta.schema_mac. A later step that changes a trigger
# or these tables must end with the same Call (it marks the definitions again).
_V11 = [Call("loopx.ledger.history_guard", "install")]

# v12: the attention summary holds every goal that may need a person (loopx/ledger/attention.py, issue 36):
# a goal with todos and none unblocked is in the attention lane too (``no_ready_work``), so the
# overview's count and order can be those of loopx.views.needs_you. The summary is rebuilt by the new rules.
_V12 = [Call("loopx.ledger.attention", "rebuild_all")]

# v13: a goal's project directory and the workspace LoopX owns for it (loopx/domain/workspace.py, issue 35):
# written only by the goal's own events (goal.created with a project, goal.workspace_set, ...), so a
# copy or a replay rebuilds it; read by the turn, `status G` and `workspace ...`, never by should-run.
_V13 = [
    """CREATE TABLE IF NOT EXISTS goal_workspaces (
        goal_id TEXT PRIMARY KEY,
        project TEXT,
        root TEXT,
        path TEXT,
        branch TEXT,
        base TEXT,
        kind TEXT,
        updated_at TEXT NOT NULL)""",
]

# A step is a list of SQL texts, ``{dialect: [SQL...]}`` for what differs per dialect, or a
# callable run with the migration's transaction (for data that only Python can derive).
MIGRATIONS: list = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13]
CURRENT_VERSION = len(MIGRATIONS)
SUMMARY_VERSION = MIGRATIONS.index(_V3) + 1  # the version that added the attention summary
INTEGRITY_VERSION = MIGRATIONS.index(_V4) + 1  # the version that added the hash chain and digests
USAGE_VERSION = MIGRATIONS.index(_V5) + 1  # the version that added the usage counters
KEYED_VERSION = MIGRATIONS.index(_V7) + 1  # the version that keyed them
CAPABILITIES_VERSION = MIGRATIONS.index(_V8) + 1  # the version that gave goals their capability list
MACS_VERSION = MIGRATIONS.index(_V9) + 1  # the version that keeps the digest per row (state_macs)
GUARD_VERSION = MIGRATIONS.index(_V11) + 1  # the version that counts changed events (history_guard)


def summary_triggers(dialect: str) -> list[str]:
    """v3's triggers that keep the attention counts (re-created by a repair of the triggers)."""
    return list(_SQLITE_TRIGGERS if dialect == "sqlite" else _POSTGRES_TRIGGERS)


def statements(dialect: str, from_version: int) -> list:
    """What takes a store at ``from_version`` to :data:`CURRENT_VERSION`: SQL texts and callables
    (``fn(tx)``), in order."""
    words = DIALECT_WORDS[dialect]
    out = []
    for step in MIGRATIONS[from_version:]:
        for item in step:
            if isinstance(item, dict):
                out.extend(sql.format(**words) for sql in item[dialect])
            elif callable(item):
                out.append(item)
            else:
                out.append(item.format(**words))
    return out

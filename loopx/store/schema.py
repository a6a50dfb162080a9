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

# v3: tamper evidence (loopx/integrity.py). Each event carries its goal's hash chain; goal_heads
# keeps each goal's chain head and current-state digest. After the DDL, existing ledgers are
# chained and every goal sealed (:data:`AFTER`).
_V3 = [
    "ALTER TABLE events ADD COLUMN prev_hash TEXT",
    "ALTER TABLE events ADD COLUMN hash TEXT",
    """CREATE TABLE IF NOT EXISTS goal_heads (
        goal_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        head_hash TEXT,
        state_digest TEXT NOT NULL)""",
]

MIGRATIONS: list[list[str]] = [_V1, _V2, _V3]
CURRENT_VERSION = len(MIGRATIONS)


def after_migration(tx, from_version: int) -> None:
    """Data steps that follow the DDL, run in the migration's transaction (``tx``: a store Tx).

    Sealing runs after *every* migration of a registry that had goals: a later step that changes
    a state table's columns changes what the state digest covers.
    """
    if from_version < CURRENT_VERSION:
        from loopx import integrity

        integrity.backfill(tx)


def statements(dialect: str, from_version: int) -> list[str]:
    """The DDL that takes a store at ``from_version`` to :data:`CURRENT_VERSION`."""
    words = DIALECT_WORDS[dialect]
    out = []
    for step in MIGRATIONS[from_version:]:
        out.extend(sql.format(**words) for sql in step)
    return out

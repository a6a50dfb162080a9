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
    # Where the overview ranks the goal; kept by loopx.attention from the rows above.
    "goal_summary": ("goal_id",),
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


def _v3() -> list:
    # v3: the attention summary (``goal_summary`` and its counters), so the overview's first page
    # is one indexed query; built for existing goals by ``loopx.attention.rebuild_all``.
    from loopx import attention

    return attention.migration()


# A step is a list of SQL texts, ``{dialect: [SQL...]}`` for what differs per dialect, or a
# callable run with the migration's transaction (for data that only Python can derive).
MIGRATIONS: list = [_V1, _V2, _v3]
CURRENT_VERSION = len(MIGRATIONS)
SUMMARY_VERSION = MIGRATIONS.index(_v3) + 1  # the version that added the attention summary


def statements(dialect: str, from_version: int) -> list:
    """What takes a store at ``from_version`` to :data:`CURRENT_VERSION`: SQL texts and callables
    (``fn(tx)``), in order."""
    words = DIALECT_WORDS[dialect]
    out = []
    for step in MIGRATIONS[from_version:]:
        for item in (step() if callable(step) else step):
            if isinstance(item, dict):
                out.extend(sql.format(**words) for sql in item[dialect])
            elif callable(item):
                out.append(item)
            else:
                out.append(item.format(**words))
    return out

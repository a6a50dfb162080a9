"""A registry still at schema 7, read without migrating it (opened read-only, as the status server
opens it): should-run's integrity check verifies the whole-state digest of that version instead
of failing on the tables and columns later schemas added (goals.capabilities at 8, the per-row
digest's state_macs / state_dirty at 9), and still catches a row edited behind LoopX's back.
"""

from __future__ import annotations

import sqlite3

from loopx.domain import goals, todos
from loopx.ledger import integrity
from loopx.ledger.registry import Registry
from loopx.views.should_run import should_run
from loopx.store import schema
from loopx.store.sqlite import SqliteTx


def _v7_registry(path: str) -> str:
    """A registry with one goal, as LoopX at schema 7 left it: no goals.capabilities, no per-row
    digest tables, each goal sealed with the keyed whole-state digest."""
    with Registry.open(path) as reg:
        g = goals.create(reg, "user", title="made before schema 8")["id"]
        todos.add(reg, "user", goal_id=g, text="a step")
    conn = sqlite3.connect(path, isolation_level=None)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND (name LIKE 'state_dirty_%'"
                                " OR name LIKE 'event%')").fetchall():  # (and schema 11's, loopx/ledger/history_guard.py)
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP TABLE event_changes")
    conn.execute("DELETE FROM meta WHERE key = 'schema_mac'")
    conn.execute("DROP TABLE state_macs")
    conn.execute("DROP TABLE state_dirty")
    conn.execute("ALTER TABLE goals DROP COLUMN capabilities")
    conn.execute("BEGIN")
    tx = SqliteTx(conn)
    h = integrity.head(tx, g)
    conn.execute("UPDATE goal_heads SET state_digest = ? WHERE goal_id = ?",
                 (integrity.state_digest(tx, g, h["seq"], h["head_hash"], integrity.keyring(tx)), g))
    conn.execute(f"PRAGMA user_version = {schema.KEYED_VERSION}")
    conn.execute("COMMIT")
    conn.close()
    return g


def _decide(path: str, goal: str) -> tuple:
    with Registry.open(path, readonly=True) as reg:
        assert reg.store.schema_version() == schema.KEYED_VERSION == 7  # read as it is, not migrated
        out = should_run(reg, "user", goal_id=goal, agent="a1", dry_run=True)
    return out["decision"], out["reasons"]


def test_a_v7_registry_read_only_is_verified_with_its_own_digest(sqlite_url):
    goal = _v7_registry(sqlite_url)
    assert _decide(sqlite_url, goal) == ("run", ["ready_work"])


def test_a_row_edited_in_a_v7_registry_read_only_is_caught(sqlite_url):
    goal = _v7_registry(sqlite_url)
    conn = sqlite3.connect(sqlite_url)
    conn.execute("UPDATE todos SET text = 'something else'")
    conn.commit()
    conn.close()
    assert _decide(sqlite_url, goal) == ("repair", ["integrity_mismatch"])

"""The state digest each write seals is computed from plain row tuples with row texts reused within
a transaction (a write hashes its goal twice): the digest must stay byte-for-byte the one every
existing registry stored, or every goal would read as tampered after an upgrade."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from loopx.ledger import integrity
from loopx.ledger.registry import Registry
from loopx.store import schema
from tests.factories import make_goal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def reference_digest(tx, goal_id: str) -> str:
    """The digest as first written (one dict per row, ``sorted(row.items())``, ``json.dumps``)."""
    h = hashlib.sha256()
    for table in integrity.STATE_TABLES:
        column = "id" if table == "goals" else "goal_id"
        if table == "runs":
            rows = tx.query("SELECT * FROM runs WHERE goal_id = ? AND status = 'open'", (goal_id,))
            closed = tx.one("SELECT COUNT(*) AS n, COALESCE(SUM(tokens), 0) AS tokens, COALESCE(SUM(cost), 0) AS cost,"
                            " MAX(opened_at) AS opened, MAX(finished_at) AS finished, MAX(expires_at) AS expires"
                            " FROM runs WHERE goal_id = ? AND status <> 'open'", (goal_id,))
            closed = [int(closed["n"]), int(closed["tokens"]), round(float(closed["cost"]), 6), closed["opened"],
                      closed["finished"], closed["expires"]]
            rows.sort(key=lambda r: r["id"])
            h.update(json.dumps(["runs", [sorted(r.items()) for r in rows], closed], default=str,
                                separators=(",", ":")).encode("utf-8", "backslashreplace"))
            continue
        rows = tx.query(f"SELECT * FROM {table} WHERE {column} = ?", (goal_id,))
        keys = schema.GOAL_TABLES[table]
        rows.sort(key=lambda r: tuple(r[k] for k in keys))
        h.update(json.dumps([table, [sorted(r.items()) for r in rows]], default=str,
                            separators=(",", ":")).encode("utf-8", "backslashreplace"))
    return h.hexdigest()


def test_digest_is_the_stored_format_and_reuse_within_a_transaction_follows_changes(tmp_path):
    import fill

    from loopx.domain import todos

    url = str(tmp_path / "registry.db")
    with Registry.open(url) as reg:
        fill.fill(reg, 60)  # limits, todos with dependencies, actions, runs, gates, an expired open run
        with reg.read() as tx:
            goals = [r["id"] for r in tx.query("SELECT id FROM goals")]
            for goal in goals:
                assert integrity.state_digest(tx, goal) == reference_digest(tx, goal)
        goal = goals[0]
        todos.add(reg, "user", goal_id=goal, text="héllo ☃ \"quoted\"")

        def change_and_rehash(tx):
            before = integrity.state_digest(tx, goal)
            tx.execute("UPDATE todos SET priority = 'P0' WHERE goal_id = ? AND text = 'first step'", (goal,))
            after = integrity.state_digest(tx, goal)  # reuses the unchanged rows' texts
            return before, after, reference_digest(tx, goal)

        before, after, reference = reg.store.write(change_and_rehash)
    assert after != before and after == reference


def test_remembered_row_texts_never_hide_a_hand_edit(tmp_path):
    """Row texts are remembered across transactions in a process (a long-lived writer rehashes the
    same rows write after write); an edit made outside LoopX must still change the digest."""
    import sqlite3

    from loopx.domain import todos

    url = str(tmp_path / "registry.db")
    with Registry.open(url) as reg:
        goal = make_goal(reg, title="edited by hand")["goal"]
        for k in range(3):
            todos.add(reg, "user", goal_id=goal, text=f"step {k}")
        with reg.read() as tx:
            sealed = integrity.state_digest(tx, goal)
        raw = sqlite3.connect(url)
        raw.execute("UPDATE todos SET note = 'hand' WHERE goal_id = ? AND text = 'step 1'", (goal,))
        raw.commit()
        with reg.read() as tx:
            edited = integrity.state_digest(tx, goal)
            assert edited == reference_digest(tx, goal) and edited != sealed
            assert [p.code for p in integrity.verify_head(tx, goal)] == ["state_digest_mismatch"]
        raw.execute("UPDATE todos SET note = NULL WHERE goal_id = ? AND text = 'step 1'", (goal,))  # undone
        raw.commit()
        raw.close()
        with reg.read() as tx:
            assert integrity.state_digest(tx, goal) == reference_digest(tx, goal) == sealed
            assert integrity.verify_head(tx, goal) == []

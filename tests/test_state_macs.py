"""The state digest kept per row (issue 25, loopx/ledger/state_macs.py): a write costs the rows it
changes, whatever the goal holds; tampering is still caught - rows the decision reads by their
MACs, inserted or deleted rows of the sets it reads whole by the counts, anything written behind
LoopX's back with its change log in place at once, and the rest by ``self-repair check``'s sum."""

from __future__ import annotations

import sqlite3

import pytest

from loopx.domain import evidence, todos
from loopx.ledger import integrity
from loopx.ledger.registry import Registry
from loopx.store import schema
from tests.reliability.tamper import raw, rows
from tests.test_turn_helpers import add_gate, ask, make_goal


def unlogged(url: str, sql: str, params: tuple = ()) -> None:
    """Run ``sql`` behind LoopX's back with its change log out of the way (what someone who
    knows about the triggers does): the triggers dropped or disabled, then put back."""
    if url.startswith("postgres"):
        import psycopg

        from loopx.store.postgres import translate

        from loopx.ledger.state_macs import TABLES

        with psycopg.connect(url, autocommit=True) as conn:
            for table in TABLES:
                conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER state_dirty_{table}")
            conn.execute(translate(sql), params)
            for table in TABLES:
                conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER state_dirty_{table}")
        return
    conn = sqlite3.connect(url)
    try:
        saved = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'state_dirty_%'"
                             ).fetchall()
        for name, _ in saved:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute(sql, params)
        for _, text in saved:  # put back, so nothing but the edit is left to find
            conn.execute(text)
        conn.commit()
    finally:
        conn.close()


def check(reg, g) -> list[str]:
    with reg.read() as tx:
        return [p.code for p in integrity.verify_chain(tx, g)]


def test_rows_the_decision_reads_are_checked_by_their_macs_even_without_the_change_log(reg, registry_url):
    g = make_goal(reg, todo_texts=("build",))["goal"]
    gate = add_gate(reg, g)["id"]
    assert ask(reg, g)["reasons"] == ["gate_pending"]
    unlogged(registry_url, "UPDATE gates SET status = 'approved', decided_by = 'user' WHERE id = ?", (gate,))
    assert rows(registry_url, "SELECT COUNT(*) AS n FROM state_dirty")[0]["n"] == 0  # the log saw nothing
    d = ask(reg, g)
    assert d["decision"] == "repair" and d["reasons"] == ["integrity_mismatch"], d
    assert check(reg, g) == ["state_digest_mismatch"]


def test_an_open_runs_contract_edited_without_the_change_log_makes_exec_refuse(loopx, tmp_path):
    import json

    url = loopx.url
    g = loopx("project_prompt", "create", "--title", "t", "--json").json["id"]
    assert loopx("todo", "add", "--goal-id", g, "--text", "build").code == 0
    c = loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json").json["interaction_contract"]
    marker = tmp_path / "pwned"
    doc = json.loads(rows(url, "SELECT document FROM contracts WHERE id = ?", (c["contract_id"],))[0]["document"])
    doc["cli_channel"]["steps"].append({"id": "x", "kind": "do", "after": [],
                                        "argv": ["loopx", "exec", "--run-id", c["run_id"], "--", "touch", str(marker)]})
    unlogged(url, "UPDATE contracts SET document = ? WHERE id = ?", (json.dumps(doc), c["contract_id"]))
    r = loopx("exec", "--run-id", c["run_id"], "--agent", "a1", "--json", "--", "touch", str(marker))
    assert r.code == 2 and r.json["error"]["code"] == "integrity_mismatch", r
    assert not marker.exists()
    assert loopx("quota", "should-run", "--goal-id", g, "--agent", "a2", "--json").json["decision"] == "repair"


def test_a_gate_deleted_without_the_change_log_changes_the_count(reg, registry_url):
    g = make_goal(reg, todo_texts=("build",))["goal"]
    add_gate(reg, g)
    unlogged(registry_url, "DELETE FROM gates WHERE goal_id = ?", (g,))
    d = ask(reg, g)
    assert d["decision"] == "repair", d
    assert check(reg, g) == ["state_digest_mismatch"]


def test_a_row_the_decision_does_not_read_is_found_by_the_whole_check(reg, registry_url):
    g = make_goal(reg, todo_texts=("old", "new"))["goal"]
    first = rows(registry_url, "SELECT id FROM todos WHERE goal_id = ? AND text = 'old'", (g,))[0]["id"]
    todos.settle(reg, "user", "done", goal_id=g, todo_id=first)
    assert check(reg, g) == []
    unlogged(registry_url, "UPDATE todos SET text = 'rewritten' WHERE id = ?", (first,))
    assert check(reg, g) == ["state_digest_mismatch"]
    # A write on top does not launder it: the sum keeps the row's old MAC.
    evidence.record(reg, "user", goal_id=g, kind="note", summary="later")
    todos.settle(reg, "user", "reopen", goal_id=g, todo_id=first)
    assert "state_digest_mismatch" in check(reg, g)


def test_a_write_costs_the_rows_it_changes_not_the_goals_todos(sqlite_url):
    """SQLite VM steps of ``evidence add`` and of a should-run are flat in the goal's done todos
    (the whole-state digest read every todo twice per write)."""

    def steps(reg, fn) -> int:
        ticks = [0]

        def tick():
            ticks[0] += 1
            return 0

        reg.store._conn.set_progress_handler(tick, 100)
        try:
            fn()
        finally:
            reg.store._conn.set_progress_handler(None, 0)
        return ticks[0]

    with Registry.open(sqlite_url) as reg:
        small = make_goal(reg, limits={"max_turns": 100}, todo_texts=("a",))["goal"]
        big = make_goal(reg, limits={"max_turns": 100}, todo_texts=("a",))["goal"]

        def pile(w):
            from loopx import api

            for i in range(2000):
                api.todos.done_in(w, todo_id=api.todos.add_in(w, text=f"old {i}"))

        reg.mutate("user", pile, goal_id=big)
        assert check(reg, big) == []
        for fn in (lambda g: evidence.record(reg, "user", goal_id=g, kind="note", summary="x"),
                   lambda g: ask(reg, g, agent=f"a{g}")):
            fn(small), fn(big)  # warm
            s, b = steps(reg, lambda: fn(small)), steps(reg, lambda: fn(big))
            assert b <= 1.5 * s + 20, (s, b)


def _as_version_7(url: str) -> None:
    """Take a registry back to schema 7: no per-row MACs, each goal's whole-state digest."""
    with Registry.open(url) as reg:
        def back(tx):
            for g in [r["goal_id"] for r in tx.query("SELECT goal_id FROM goal_heads")]:
                h = integrity.head(tx, g)
                digest = integrity.state_digest(tx, g, h["seq"], h["head_hash"], integrity.keyring(tx))
                tx.execute("UPDATE goal_heads SET state_digest = ? WHERE goal_id = ?", (digest, g))
        reg.store.write(back)
    conn = sqlite3.connect(url)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'state_dirty_%'"
                                ).fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP TABLE state_macs")
    conn.execute("DROP TABLE state_dirty")
    conn.execute(f"PRAGMA user_version = {schema.MACS_VERSION - 1}")
    conn.commit()
    conn.close()


def test_the_migration_macs_intact_goals_and_seals_altered_ones_untrusted(sqlite_url):
    with Registry.open(sqlite_url) as reg:
        fine = make_goal(reg, todo_texts=("a", "b"))["goal"]
        hurt = make_goal(reg, todo_texts=("a",))["goal"]
        add_gate(reg, hurt)
    _as_version_7(sqlite_url)
    raw(sqlite_url, "UPDATE gates SET status = 'approved' WHERE goal_id = ?", (hurt,))  # before the upgrade
    with Registry.open(sqlite_url) as reg:
        with reg.read() as tx:
            assert tx.one("SELECT COUNT(*) AS n FROM state_macs WHERE goal_id = ?", (fine,))["n"] > 0
            assert integrity.head(tx, fine)["state_digest"].startswith("v3 ")
            assert integrity.head(tx, hurt)["state_digest"] == integrity.UNTRUSTED
        assert check(reg, fine) == [] and ask(reg, fine)["reasons"] == ["ready_work"]
        assert check(reg, hurt) == ["state_digest_mismatch"]
        assert ask(reg, hurt)["decision"] == "repair"

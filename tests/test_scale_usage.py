"""Quota usage is kept in counters moved by each run event (issue 25), not summed over runs:
the counters equal the sums of the runs rows, a replay of the ledger makes the same ones, and an
older registry gets them on migration."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from loopx import api
from loopx.ledger import log as ledger, usage_counts
from loopx.views import quota
from loopx.domain import runs
from loopx.ledger.registry import Registry
from loopx.store import schema
from tests.conftest import loopx_env
from tests.test_turn_helpers import ask, make_goal


def _counters(reg, g) -> tuple:
    with reg.read() as tx:
        row = tx.one("SELECT turns, tokens, cost_micros, wall_us, last_opened FROM goal_usage WHERE goal_id = ?",
                     (g,))
        return tuple(row.values()) if row else None, usage_counts.from_runs(tx, g).get(g)


def _busy_goal(reg, moved) -> str:
    """A goal with finished, late-finished, abandoned and open runs, charged tokens and costs."""
    g = make_goal(reg, parallel=True, todo_texts=("a", "b", "c"))["goal"]
    for i, (tokens, cost) in enumerate([(1200, 0.25), (7, 0.1), (0, 0.3333331)]):
        run = ask(reg, g, agent=f"a{i}")["interaction_contract"]["run_id"]
        runs.finish(reg, "user", run_id=run, outcome="ok", tokens=tokens, cost=cost)
    slow = ask(reg, g, agent="slow", ttl_seconds=60)["interaction_contract"]
    moved.advance(61)  # the lease must pass for the run to be abandoned
    ask(reg, g, agent="other")  # abandons the slow run (charged up to its expiry), opens one
    runs.finish(reg, "user", run_id=slow["run_id"], outcome="partial", tokens=5, cost=0.02)  # a late report
    return g


def test_counters_equal_the_runs_sums_and_a_replay_of_the_ledger(reg, loopx_clock):
    g = _busy_goal(reg, loopx_clock)
    have, summed = _counters(reg, g)
    assert have == summed and have[0] == 5 and have[1] == 1212 and have[2] == 250000 + 100000 + 333333 + 20000
    with reg.read() as tx:
        used = quota.usage(tx, g)
        snap = api.goals.snapshot(tx, g)
        goal_events = ledger.events(tx, g)
    assert (used.turns, used.tokens, used.cost) == (5, 1212, 0.703333)
    assert used.wall_seconds >= 60.0  # the abandoned run's lease, at least
    replayed, replayed_usage = api.goals.replay(goal_events)
    assert replayed["goal_usage"] == snap["goal_usage"] and len(snap["goal_usage"]) == 1
    assert replayed == snap and replayed_usage == used


def test_an_older_registry_gets_its_counters_on_migration(tmp_path, loopx_clock):
    path = str(tmp_path / "old.db")
    with Registry.open(path) as reg:
        g = _busy_goal(reg, loopx_clock)
        before = _counters(reg, g)[0]

        def whole_state_digest(tx):  # as schemas before 9 sealed it (no per-row MACs)
            from loopx.ledger import integrity

            h = integrity.head(tx, g)
            digest = integrity.state_digest(tx, g, h["seq"], h["head_hash"], integrity.keyring(tx))
            tx.execute("UPDATE goal_heads SET state_digest = ? WHERE goal_id = ?", (digest, g))

        reg.store.write(whole_state_digest)
    conn = sqlite3.connect(path)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'state_dirty_%'"
                                ).fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    for table in ("state_macs", "state_dirty", "goal_usage", "todo_deps", "todo_ready"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute(f"PRAGMA user_version = {schema.USAGE_VERSION - 1}")
    conn.commit()
    conn.close()
    with Registry.open(path) as reg:  # opening read-write migrates
        assert reg.store.schema_version() == schema.CURRENT_VERSION
        assert _counters(reg, g) == (before, before)
    check = subprocess.run([sys.executable, "-m", "loopx", "self-repair", "check", "--json"],
                           env=loopx_env(path, LOOPX_PLUGINS="self_repair"), capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr

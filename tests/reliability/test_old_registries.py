"""Registries written by an older LoopX: chains computed on migration, poisoned values readable.

An old registry (the schema before tamper evidence) is made by writing with this LoopX and then
taking away what that migration added; values older versions let in (a lone surrogate, Infinity) are written the way they stored
them: Python's json.dumps of the parsed value.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.factories import make_goal
from tests.reliability.conftest import env as loopx_env


def run(url, *args):
    p = subprocess.run([sys.executable, "-m", "loopx", *args], env=loopx_env(url), capture_output=True, text=True,
                       timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _make_old(path, poisoned: bool):
    from loopx.domain import evidence, gates, todos
    from loopx.ledger.registry import Registry

    with Registry.open(str(path)) as reg:
        g = make_goal(reg, title="old goal")["goal"]
        todos.add(reg, "user", goal_id=g, text="a step")
        gate = gates.add(reg, "user", goal_id=g, title="prod?", scope="production")["id"]
        ev = evidence.record(reg, "user", goal_id=g, kind="note", summary="poison", data={"s": "x", "n": [1]})["id"]
    conn = sqlite3.connect(path)
    if poisoned:
        # What `evidence add --data '{"s":"\ud800","n":[1e999]}'` stored before strict parsing.
        body = json.loads(conn.execute("SELECT body FROM events WHERE kind = 'evidence.added'").fetchone()[0])
        body["data"] = {"s": "\ud800", "n": [float("inf")]}
        conn.execute("UPDATE events SET body = ? WHERE kind = 'evidence.added'",
                     (json.dumps(body, sort_keys=True, separators=(",", ":")),))
        conn.execute("UPDATE evidence SET data = ?", (json.dumps(body["data"], sort_keys=True),))
    conn.execute("ALTER TABLE events DROP COLUMN prev_hash")
    conn.execute("ALTER TABLE events DROP COLUMN hash")
    conn.execute("DROP TABLE goal_heads")
    # Nor had it an id and a key (schema 5): it is keyed when migrated.
    conn.execute("DELETE FROM meta WHERE key IN ('registry_id', 'integrity_keyed')")
    from loopx.store import schema

    conn.execute(f"PRAGMA user_version = {schema.INTEGRITY_VERSION - 1}")
    conn.commit()
    conn.close()
    from loopx.ledger import keys

    for f in keys.key_dir().glob("*.location"):  # nor had a LoopX keyed it, here or anywhere
        f.unlink()
    return g, gate, ev


def test_migration_chains_an_old_ledger_and_seals_every_goal(tmp_path):
    path = tmp_path / "old.db"
    g, gate, _ = _make_old(path, poisoned=False)
    assert run(str(path), "self-repair", "check").returncode == 1  # read-only: reports the old schema
    p = run(str(path), "quota", "should-run", "--goal-id", g, "--json")  # a write: migrates
    assert p.returncode == 0 and json.loads(p.stdout)["reasons"] == ["gate_pending"], p.stdout
    conn = sqlite3.connect(path)
    from loopx.store import schema

    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.CURRENT_VERSION
    assert conn.execute("SELECT COUNT(*) FROM events WHERE hash IS NULL").fetchone()[0] == 0
    conn.close()
    assert run(str(path), "self-repair", "check").returncode == 0
    # From now on, tampering with the migrated registry is seen.
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM gates WHERE id = ?", (gate,))
    conn.commit()
    conn.close()
    p = run(str(path), "quota", "should-run", "--goal-id", g, "--json")
    assert json.loads(p.stdout)["decision"] == "repair"


@pytest.mark.slow
def test_poisoned_values_are_readable_reported_and_fixed(tmp_path):
    path = tmp_path / "old.db"
    g, _, ev = _make_old(path, poisoned=True)
    url = str(path)
    assert run(url, "registry", "init").returncode == 0  # migrates
    # Every reader emits valid UTF-8 JSON, never a traceback or a bare Infinity.
    for args in (["history", "--goal-id", g], ["history", "--goal-id", g, "--json"],
                 ["status", "--goal-id", g, "--json"], ["evidence", "list", "--goal-id", g, "--json"]):
        p = subprocess.run([sys.executable, "-m", "loopx", *args], env=loopx_env(url), capture_output=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        text = p.stdout.decode("utf-8")  # strict: valid UTF-8
        if "--json" in args:
            json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in output of {args}"))
    p = run(url, "self-repair", "check", "--json")
    found = json.loads(p.stdout)["findings"]
    assert p.returncode == 1 and [f["code"] for f in found] == ["unreadable_data"], found
    p = run(url, "self-repair", "fix", "--json")
    assert p.returncode == 0, p.stdout
    assert run(url, "self-repair", "check").returncode == 0
    p = run(url, "evidence", "list", "--goal-id", g, "--json")
    listed = {e["id"]: e for e in json.loads(p.stdout)}
    assert listed[ev]["data"] == {"s": "\\ud800", "n": ["Infinity"]}
    originals = [e for e in listed.values() if e["kind"] == "repair.original_bytes"]
    assert len(originals) == 1 and "\\ud800" in originals[0]["data"]["events"][0]["original_body"]
    assert "Infinity" in originals[0]["data"]["events"][0]["original_body"]
    p = run(url, "quota", "should-run", "--goal-id", g, "--json")
    assert json.loads(p.stdout)["reasons"] == ["gate_pending"]

"""A registry that holds ``capability.repaired`` events, written when LoopX's core still defined
the repair vocabulary (it lives in the self_repair plugin now, as ``self_repair.repaired``).

``data/repairs-capability-v4.sql`` is such a registry, dumped from the LoopX of that time: one
goal whose ``gate.added`` event was deleted and rebuilt (the repair recorded event 3 as lost,
acknowledged the break at 4 and kept the gate), one whose stale lease was released. With the
plugin installed it opens, verifies and replays to the same state, on SQLite and PostgreSQL;
without it, its events are kept, shown as a kind no installed plugin knows, and a copy that
would replay them as nothing is refused instead of silently losing what they did.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import loopx_env

OLD = Path(__file__).resolve().parent / "data" / "repairs-capability-v4.sql"
REBUILT, RELEASED = "g-969266060c5e", "g-3e1572339aee"


def run(url, *args, plugin=True):
    env = loopx_env(url, LOOPX_PLUGINS="self_repair" if plugin else "")
    p = subprocess.run([sys.executable, "-m", "loopx", *args], env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p


@pytest.fixture
def old(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(OLD.read_text())
    conn.commit()
    conn.close()
    return str(path)


def kinds(url, g):
    from loopx import api

    with api.open_registry(url) as reg, reg.read() as tx:
        return [e.kind for e in api.goal_events(tx, g)]


def state_and_replay(url, g):
    from loopx import api

    with api.open_registry(url) as reg, reg.read() as tx:
        return api.goal_snapshot(tx, g), api.replay_goal(api.goal_events(tx, g))[0]


def test_with_the_plugin_an_older_registry_verifies_replays_and_copies_to_every_backend(old, registry_url):
    assert kinds(old, REBUILT).count("capability.repaired") == 1
    p = run(old, "self-repair", "check", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"], p.stdout  # chain (with its recorded loss) and replay
    for g in (REBUILT, RELEASED):
        live, replayed = state_and_replay(old, g)
        assert live == replayed
    assert json.loads(run(old, "quota", "should-run", "--goal-id", REBUILT, "--json").stdout)["reasons"] == [
        "gate_pending"]  # the gate the old repair kept still holds the goal
    # The copy replays every event into the target - through the plugin's former name - and
    # compares state with the source's, goal by goal (the recorded gap is copied as it is).
    p = run(old, "registry", "copy", "--from", old, "--to", registry_url, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["verified"], p.stderr
    for g in (REBUILT, RELEASED):
        assert state_and_replay(registry_url, g)[0] == state_and_replay(old, g)[0]
    assert json.loads(run(registry_url, "self-repair", "check", "--json").stdout)["ok"]


def test_new_repairs_on_an_older_registry_use_the_plugins_kind_and_replay_with_the_old_ones(old):
    conn = sqlite3.connect(old)
    conn.execute("DELETE FROM todos WHERE goal_id = ?", (REBUILT,))  # damage behind the ledger's back
    conn.commit()
    conn.close()
    p = run(old, "self-repair", "fix", "--goal-id", REBUILT, "--json")
    assert p.returncode == 0, p.stdout
    assert kinds(old, REBUILT)[-1] == "self_repair.repaired"
    assert kinds(old, REBUILT).count("capability.repaired") == 1
    # The new rebuild replays the old one (it puts back the gate that one kept): nothing lost.
    live, replayed = state_and_replay(old, REBUILT)
    assert live == replayed and [r["status"] for r in live["gates"]] == ["pending"] and live["todos"]
    assert json.loads(run(old, "self-repair", "check", "--json").stdout)["ok"]


def test_without_the_plugin_the_events_are_kept_shown_as_unknown_and_never_replayed_away(old, tmp_path):
    before = kinds(old, REBUILT)
    p = run(old, "history", "--goal-id", REBUILT, "--json", plugin=False)
    assert p.returncode == 0, p.stderr
    [repaired] = [e for e in json.loads(p.stdout) if e["kind"] == "capability.repaired"]
    assert "self_repair plugin, which is not installed" in repaired["unknown_kind"]
    assert repaired["body"]["kept"]["gates"]  # the whole event, as written
    assert "[unknown kind:" in run(old, "history", "--goal-id", REBUILT, plugin=False).stdout
    # The core still honours the loss it recorded: the chain verifies, turns are decided.
    d = json.loads(run(old, "quota", "should-run", "--goal-id", REBUILT, "--json", plugin=False).stdout)
    assert d["reasons"] == ["gate_pending"], d
    d = json.loads(run(old, "quota", "should-run", "--goal-id", RELEASED, "--agent", "a1", "--json",
                       plugin=False).stdout)
    assert d["decision"] == "run", d
    # Replaying those events as nothing would give another state: a copy refuses, naming why.
    p = run(old, "registry", "copy", "--from", old, "--to", str(tmp_path / "copy.db"), "--json", plugin=False)
    assert p.returncode == 2
    error = json.loads(p.stdout)["error"]
    assert error["code"] == "copy_mismatch" and "capability.repaired" in error["message"]
    assert "self_repair plugin" in error["message"]
    assert kinds(old, REBUILT)[: len(before)] == before


def test_the_plugin_registers_its_kind_and_the_former_core_name_through_the_hook():
    # loopx_register_event_kinds of plugins/self_repair, as the
    # core sees them: the kind is writable by capabilities, the former core name by nobody.
    from loopx import ledger, plugins
    kinds = plugins.event_kinds(tuple(ledger.AREAS), ledger.RETIRED_KINDS)
    assert kinds["self_repair.repaired"][1] == {"capability"} and kinds["self_repair.repaired"][3] == "self_repair"
    assert kinds["capability.repaired"][1] == frozenset()
    assert ledger.unknown_kind("capability.repaired") is None

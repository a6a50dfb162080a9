"""A registry that holds ``capability.repaired`` events, written when LoopX's core still named
the repair event (self-repair records ``self_repair.repaired`` now, through the core's repair API).

``data/repairs-capability-v4.sql`` is such a registry, dumped from the LoopX of that time: one
goal whose ``gate.added`` event was deleted and rebuilt (the repair recorded event 3 as lost,
acknowledged the break at 4 and kept the gate), one whose stale lease was released. With the
plugin installed it opens, verifies and replays to the same state, on SQLite and PostgreSQL;
without it too: the core replays the old kind through its repair API (``loopx.domain.repairs``).
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
        return [e.kind for e in api.goals.events(tx, g)]


def state_and_replay(url, g):
    from loopx import api

    with api.open_registry(url) as reg, reg.read() as tx:
        return api.goals.snapshot(tx, g), api.goals.replay(api.goals.events(tx, g))[0]


def test_with_the_plugin_an_older_registry_verifies_replays_and_copies_to_every_backend(old, registry_url):
    assert kinds(old, REBUILT).count("capability.repaired") == 1
    p = run(old, "self-repair", "check", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"], p.stdout  # chain (with its recorded loss) and replay
    for g in (REBUILT, RELEASED):
        live, replayed = state_and_replay(old, g)
        assert live == replayed
    assert json.loads(run(old, "quota", "should-run", "--goal-id", REBUILT, "--json").stdout)["reasons"] == [
        "gate_pending"]  # the gate the old repair kept still holds the goal
    # The copy replays every event into the target - the old kind through the core - and
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


def test_without_the_plugin_the_core_still_replays_them(old, tmp_path):
    # The core's repair API applies the old kind itself: the core names no plugin for it.
    before = kinds(old, REBUILT)
    p = run(old, "history", "--goal-id", REBUILT, "--json", plugin=False)
    assert p.returncode == 0, p.stderr
    [repaired] = [e for e in json.loads(p.stdout) if e["kind"] == "capability.repaired"]
    assert "unknown_kind" not in repaired and repaired["body"]["kept"]["gates"]  # the whole event, as written
    assert "[unknown kind:" not in run(old, "history", "--goal-id", REBUILT, plugin=False).stdout
    # The core honours the loss it recorded: the chain verifies, turns are decided.
    d = json.loads(run(old, "quota", "should-run", "--goal-id", REBUILT, "--json", plugin=False).stdout)
    assert d["reasons"] == ["gate_pending"], d
    d = json.loads(run(old, "quota", "should-run", "--goal-id", RELEASED, "--agent", "a1", "--json",
                       plugin=False).stdout)
    assert d["decision"] == "run", d
    # A copy replays every event, the old repairs too, and compares: the same state.
    target = str(tmp_path / "copy.db")
    p = run(old, "registry", "copy", "--from", old, "--to", target, "--json", plugin=False)
    assert p.returncode == 0 and json.loads(p.stdout)["verified"], p.stdout + p.stderr
    for g in (REBUILT, RELEASED):
        assert state_and_replay(target, g)[0] == state_and_replay(old, g)[0]
    assert kinds(old, REBUILT)[: len(before)] == before


def test_the_plugin_registers_its_kind_and_the_core_keeps_the_former_name():
    # loopx_register_event_kinds of plugins/self_repair, as the core sees them: the kind is
    # writable by capabilities; the former core name is the core's, written by nobody.
    from loopx.ledger import log as ledger
    from loopx.seam import plugins
    from loopx.api import LoopxError, Registry

    kinds = plugins.event_kinds(tuple(ledger.AREAS), ledger.RETIRED_KINDS)
    assert kinds["self_repair.repaired"][1] == {"capability"} and kinds["self_repair.repaired"][3] == "self_repair"
    assert "capability.repaired" not in kinds and ledger.RETIRED_KINDS == {}
    assert ledger.kind("capability.repaired").writers == frozenset()
    assert ledger.unknown_kind("capability.repaired") is None
    with Registry.open(":memory:") as reg:
        g = reg.mutate("user", lambda w: w.emit("goal.created", {"title": "t", "description": "", "criteria": [],
                                                                 "parallel_runs": False}, goal_id="g-1") and "g-1")
        with pytest.raises(LoopxError) as err:
            reg.mutate("capability:self_repair", lambda w: w.emit("capability.repaired", {}), goal_id=g)
        assert err.value.code == "actor_forbidden"

"""Every self-repair detector on a registry damaged on purpose (raw SQL on the SQLite file), the
contract veto, and the fix recorded in the ledger.

These tests use the fixtures LoopX installs for plugin authors (``loopx_registry``, ``loopx_cli``,
``loopx_clock``) and import nothing of LoopX but ``loopx.api`` and ``loopx.testing``: a copy of the
plugin that has only those passes them (tests/test_self_repair_api_only.py).
"""

import json
import sqlite3
from datetime import datetime, timedelta

from loopx import api
from loopx.testing import forbid_ledger_replay, old_sqlite_registry, tamper_sqlite
from loopx_self_repair import detectors, repairs


# --- helpers ---------------------------------------------------------------------------------


def new_goal(reg, title="Investigate Quarterly Revenue Spike"):
    return api.goals.create(reg, "user", title=title)["id"]


def add_todo(reg, g, text, depends_on=()):
    return api.todos.add(reg, "user", goal_id=g, text=text, depends_on=list(depends_on))["id"]


def open_run(reg, g, agent="a1", ttl=3600):
    r = api.runs.should_run(reg, "user", goal_id=g, agent=agent, ttl_seconds=ttl)
    assert r["decision"] == "run", r
    return r["interaction_contract"]["run_id"]


def raw(reg, *statements, sealed=True):
    """Damage the registry behind LoopX's back: raw SQL on the SQLite file.

    ``sealed`` (the default) re-chains and re-seals every goal afterwards, as migrating a registry
    an older LoopX damaged would: the damage predates the hash chain, so only these detectors can
    find it. tests/reliability/test_tamper.py covers damage done after the chain existed.
    """
    tamper_sqlite(reg, *statements, reseal=sealed)


def later(seconds):
    """LoopX's clock ``seconds`` from now, as LoopX writes times."""
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"
    return (datetime.strptime(api.now(), stamp) + timedelta(seconds=seconds)).strftime(stamp)


def event_of(reg, g, kind, **match):
    with reg.read() as tx:
        for e in api.goals.events(tx, g):
            if e.kind == kind and all(e.body.get(k) == v for k, v in match.items()):
                return e
    raise AssertionError(f"no {kind} {match}")


def rewrite_event(e, **changes):
    """The statement that rewrites a ledger entry's body (damaging the ledger itself)."""
    body = {**e.body, **changes}
    return "UPDATE events SET body = ? WHERE id = ?", (json.dumps(body), e.id)


def codes(report):
    return sorted({f["code"] for f in report["findings"]})


def check(reg, g=None, **kw):
    return detectors.check(reg, goal_id=g, **kw)


def veto(reg, g):
    with reg.read() as tx:
        return [f.code for f in detectors.veto_findings(tx, g)]


def decision(loopx_cli, g):
    r = loopx_cli("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json")
    assert r.code == 0, r
    return r.json


def fix(loopx_cli, *args):
    r = loopx_cli("self-repair", "fix", *args, "--json")
    assert r.code in (0, 1), r
    return r


def repair_events(reg, g):
    with reg.read() as tx:
        return [(e.actor, e.kind, e.body.get("repair")) for e in api.goals.events(tx, g)
                if e.actor == "capability:self_repair" or e.body.get("by") == "capability:self_repair"]


def assert_replay_matches(reg, g):
    with reg.read() as tx:
        assert api.goals.snapshot(tx, g) == api.goals.replay(api.goals.events(tx, g))[0]


# --- a healthy registry ----------------------------------------------------------------------


def test_a_healthy_registry_has_no_findings(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    a = add_todo(reg, g, "load data")
    b = add_todo(reg, g, "fit model", [a])
    api.gates.request(reg, "user", goal_id=g, title="ok to publish?", scope="production", blocks=f"todo:{b}")
    run = open_run(reg, g)
    api.evidence.add(reg, "user", kind="note", summary="loaded", run_id=run)
    report = check(reg)
    assert report["ok"] is True and report["findings"] == [] and report["checked"]["goals"] == 1
    r = loopx_cli("self-repair", "check", "--json")
    assert r.code == 0 and r.json["ok"] and r.json["checked"]["goals"] == 1
    assert "nothing to repair" in loopx_cli("self-repair", "check").out
    assert veto(reg, g) == []


# --- each detector ---------------------------------------------------------------------------


def test_revision_mismatch_vetoes_and_fix_rebuilds(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    add_todo(reg, g, "a")
    raw(reg, ("UPDATE goals SET revision = 1 WHERE id = ?", (g,)))
    assert "revision_mismatch" in codes(check(reg, g))
    assert veto(reg, g) == ["revision_mismatch"]
    contract = decision(loopx_cli, g)
    assert contract["decision"] == "repair" and contract["reasons"] == ["needs_repair"]
    assert contract["interaction_contract"]["cli_channel"]["next_cli_actions"] == [f"loopx self-repair fix --goal-id {g}"]
    r = fix(loopx_cli, "--goal-id", g)
    assert r.code == 0 and r.json["ok"], r
    assert {x["code"] for x in r.json["repaired"]} >= {"revision_mismatch"}
    assert ("capability:self_repair", "self_repair.repaired", "state_rebuilt") in repair_events(reg, g)
    assert check(reg, g)["ok"]
    assert decision(loopx_cli, g)["decision"] == "run"
    assert_replay_matches(reg, g)


def test_ledger_drift_is_found_by_the_full_check_and_rebuilt(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    a = add_todo(reg, g, "the real text")
    raw(reg, ("UPDATE todos SET text = 'tampered', priority = 'P0' WHERE id = ?", (a,)),
        ("UPDATE goals SET title = 'renamed behind the ledger' WHERE id = ?", (g,)))
    report = check(reg, g)
    assert codes(report) == ["ledger_drift"]
    tables = report["findings"][0]["details"]["tables"]
    assert tables["todos"]["changed"] == [a] and tables["goals"]["changed"] == [g]
    assert veto(reg, g) == []  # a replay is too dear for every should-run: the full check finds it
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"] and [x["code"] for x in r.json["repaired"]] == ["ledger_drift"]
    with reg.read() as tx:
        assert api.todos.load(tx, g, a).text == "the real text"
        assert api.goals.load(tx, g).title == "Investigate Quarterly Revenue Spike"
    assert_replay_matches(reg, g)


def test_stale_lease_is_housekeeping_never_a_veto(loopx_registry, loopx_cli, loopx_clock):
    reg = loopx_registry
    g = new_goal(reg)
    a = add_todo(reg, g, "a")
    claimed = loopx_cli("todo", "claim", "--goal-id", g, "--todo-id", a, "--agent", "crashed-agent",
                        "--ttl-seconds", "60", "--json")
    assert claimed.code == 0, claimed
    assert check(reg, g)["ok"]  # not expired yet
    report = check(reg, g, now=later(3600))
    assert codes(report) == ["stale_lease"]
    f = report["findings"][0]
    assert f["subject"] == a and f["severity"] == "housekeeping" and f["details"]["agent"] == "crashed-agent"
    assert veto(reg, g) == []
    loopx_clock.advance(61)  # the lease runs out
    assert "stale_lease" in codes(check(reg, g))
    # Housekeeping alone is a warning: listed, exit 0 (a monitor does not alarm); --strict exits 1.
    r = loopx_cli("self-repair", "check")
    assert r.code == 0 and "stale_lease (housekeeping)" in r.out and "warning(s), housekeeping only" in r.out, r
    r = loopx_cli("self-repair", "check", "--json")
    assert r.code == 0 and not r.json["ok"] and codes(r.json) == ["stale_lease"], r
    assert loopx_cli("self-repair", "check", "--strict").code == 1
    assert decision(loopx_cli, g)["decision"] == "run"  # the core already treats it as free
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"] and [x["code"] for x in r.json["repaired"]] == ["stale_lease"], r
    with reg.read() as tx:
        assert api.todos.load(tx, g, a).claim is None
        assert api.todos.load(tx, g, a).epoch == 1  # a later claim still bumps the epoch
    assert ("capability:self_repair", "self_repair.repaired", "lease_released") in repair_events(reg, g)
    assert_replay_matches(reg, g)


def test_abandoned_run_is_recorded_with_the_core_event(loopx_registry, loopx_cli, loopx_clock):
    reg = loopx_registry
    g = new_goal(reg)
    run = open_run(reg, g, ttl=60)
    report = check(reg, g, now=later(120))
    assert codes(report) == ["abandoned_run"] and report["findings"][0]["subject"] == run
    assert veto(reg, g) == []
    loopx_clock.advance(120)  # the run's lease runs out
    assert "abandoned_run" in codes(check(reg, g))
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"] and [x["code"] for x in r.json["repaired"]] == ["abandoned_run"], r
    e = event_of(reg, g, "run.abandoned", run_id=run)
    # A core transition the capability asked for: the ledger names the capability, never "core".
    assert e.actor == "capability:self_repair" and e.body["by"] == "capability:self_repair"
    with reg.read() as tx:
        assert tx.one("SELECT status FROM runs WHERE id = ?", (run,))["status"] == "abandoned"
    assert_replay_matches(reg, g)


def test_evidence_without_a_run(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    run = open_run(reg, g)
    ev = api.evidence.add(reg, "user", kind="note", summary="observed", run_id=run)["id"]
    # Damage the ledger itself: the evidence entry now names a run that never existed.
    e = event_of(reg, g, "evidence.added", evidence_id=ev)
    raw(reg, rewrite_event(e, run_id="r-000000000000"), ("UPDATE evidence SET run_id = 'r-000000000000' WHERE id = ?", (ev,)))
    report = check(reg, g)
    assert codes(report) == ["orphan_evidence"]
    assert report["findings"][0]["details"] == {"run_id": "r-000000000000"}
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"] and [x["code"] for x in r.json["repaired"]] == ["orphan_evidence"], r
    with reg.read() as tx:
        row = tx.one("SELECT run_id, summary FROM evidence WHERE id = ?", (ev,))
    assert row == {"run_id": None, "summary": "observed"}  # the observation stays
    repaired = event_of(reg, g, "self_repair.repaired", repair="evidence_unbound")
    assert repaired.body["run_id_was"] == "r-000000000000"
    assert_replay_matches(reg, g)


def test_evidence_whose_run_row_vanished_is_restored_from_the_ledger(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    run = open_run(reg, g)
    api.evidence.add(reg, "user", kind="note", summary="observed", run_id=run)
    raw(reg, ("DELETE FROM runs WHERE id = ?", (run,)))
    # Usage is kept in counters (goal_usage), which still hold the run's turn: no quota drift.
    assert codes(check(reg, g)) == ["ledger_drift", "orphan_evidence"]
    r = fix(loopx_cli)
    assert r.json["ok"], r
    with reg.read() as tx:
        assert tx.one("SELECT id FROM runs WHERE id = ?", (run,)) is not None
    assert not any(e[2] == "evidence_unbound" for e in repair_events(reg, g))


def test_todo_depending_on_a_missing_todo(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    a = add_todo(reg, g, "a")
    b = add_todo(reg, g, "b", [a])
    # Ledger and state agree, and both point at a todo that does not exist.
    ghost = "t-000000000000"
    e = event_of(reg, g, "todo.added", todo_id=b)
    raw(reg, rewrite_event(e, depends_on=[a, ghost]),
        ("UPDATE todos SET depends_on = ? WHERE id = ?", (json.dumps([a, ghost]), b)),
        # The ready set's index holds the same edge (what the ledger's apply would have written).
        ("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?)", (g, b, ghost)))
    report = check(reg, g)
    assert codes(report) == ["missing_dependency"]
    assert report["findings"][0]["subject"] == b and report["findings"][0]["details"] == {"missing": [ghost]}
    assert veto(reg, g) == ["missing_dependency"]
    assert decision(loopx_cli, g)["decision"] == "repair"
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"] and [x["code"] for x in r.json["repaired"]] == ["missing_dependency"], r
    with reg.read() as tx:
        assert api.todos.load(tx, g, b).depends_on == [a]  # only the missing one is dropped
    assert decision(loopx_cli, g)["decision"] == "run"
    assert_replay_matches(reg, g)


def test_gate_pointing_at_a_missing_todo_is_widened_not_removed(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    a = add_todo(reg, g, "publish")
    gate = api.gates.request(reg, "user", goal_id=g, title="ok to publish?", scope="production",
                            blocks=f"todo:{a}")["id"]
    e = event_of(reg, g, "gate.added", gate_id=gate)
    ghost = "t-000000000000"
    raw(reg, rewrite_event(e, blocks=f"todo:{ghost}"), ("UPDATE gates SET blocks = ? WHERE id = ?", (f"todo:{ghost}", gate)))
    report = check(reg, g)
    assert codes(report) == ["dangling_gate"] and report["findings"][0]["subject"] == gate
    assert veto(reg, g) == ["dangling_gate"]
    assert decision(loopx_cli, g)["decision"] == "repair"
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"], r
    with reg.read() as tx:
        row = tx.one("SELECT blocks, status FROM gates WHERE id = ?", (gate,))
    assert row == {"blocks": "all", "status": "pending"}
    # Human control is kept: the goal now waits for a user to decide that gate.
    contract = decision(loopx_cli, g)
    assert contract["decision"] == "ask_user" and contract["reasons"] == ["gate_pending"]
    assert_replay_matches(reg, g)


def test_a_gate_on_a_removed_action_is_not_damage(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    assert loopx_cli("action", "add", "--goal-id", g, "--name", "deploy", "--", "echo", "hi", "--json").code == 0
    api.gates.request(reg, "user", goal_id=g, title="deploy?", scope="production", blocks="action:deploy")
    assert loopx_cli("action", "remove", "--goal-id", g, "--name", "deploy", "--json").code == 0
    assert check(reg, g)["ok"]


def test_quota_usage_disagreeing_with_the_ledger(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    run = open_run(reg, g)
    assert loopx_cli("run", "finish", "--run-id", run, "--outcome", "ok", "--tokens", "1200", "--json").code == 0
    # Usage lives in the goal's counters (goal_usage), which contracts read.
    raw(reg, ("UPDATE goal_usage SET tokens = 5, cost_micros = 99500000 WHERE goal_id = ?", (g,)))
    report = check(reg, g)
    assert codes(report) == ["ledger_drift", "quota_drift"]
    drift = next(f for f in report["findings"] if f["code"] == "quota_drift")
    assert drift["details"]["tokens"] == {"state": 5, "ledger": 1200}
    assert drift["details"]["cost"] == {"state": 99.5, "ledger": 0.0}
    r = fix(loopx_cli, "--goal-id", g)
    assert r.json["ok"], r
    assert loopx_cli("quota", "show", "--goal-id", g, "--json").json["used"]["tokens"] == 1200


def test_storage_integrity(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    for i in range(5):
        add_todo(reg, g, f"step {i}")
    _corrupt_index(reg.store.path, "todos_by_goal", "UPDATE todos SET status = 'blocked'")
    report = check(reg)
    assert "storage_integrity" in codes(report)
    f = next(f for f in report["findings"] if f["code"] == "storage_integrity")
    assert f["goal_id"] is None and "todos_by_goal" in json.dumps(f["details"])
    r = loopx_cli("self-repair", "check")
    assert r.code == 1 and "storage_integrity" in r.out
    r = fix(loopx_cli)
    assert any(x["code"] == "storage_integrity" and x["result"] == "reindexed" for x in r.json["repaired"]), r
    assert reg.store.integrity_check() == []


def test_schema_version_behind(tmp_path, loopx_cli, monkeypatch):
    # A registry as an older LoopX left it: the first schema step only.
    path = tmp_path / "old.db"
    assert old_sqlite_registry(path) == 1
    env = {"LOOPX_REGISTRY": str(path)}
    r = loopx_cli("self-repair", "check", "--json", env=env)
    assert r.code == 1, r
    assert codes(r.json) == ["schema_behind"]
    assert r.json["findings"][0]["details"] == {"version": 1, "current": api.RepairSession.SCHEMA_VERSION}
    r = loopx_cli("self-repair", "fix", "--json", env=env)
    assert r.code == 0 and r.json["repaired"][0]["code"] == "schema_behind", r
    assert loopx_cli("self-repair", "check", "--json", env=env).json["ok"]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == api.RepairSession.SCHEMA_VERSION
    con.close()


# --- the veto is cheap; fix is safe ----------------------------------------------------------


def test_the_veto_never_replays_the_ledger(loopx_registry, loopx_cli, monkeypatch):
    reg = loopx_registry
    g = new_goal(reg)
    add_todo(reg, g, "a")

    forbid_ledger_replay(monkeypatch)
    assert decision(loopx_cli, g)["decision"] == "run"


def test_fix_on_a_healthy_registry_writes_nothing(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    add_todo(reg, g, "a")
    before = reg_events(reg, g)
    r = fix(loopx_cli)
    assert r.code == 0 and r.json == {"ok": True, "repaired": [], "remaining": []}
    assert reg_events(reg, g) == before
    assert "nothing to repair" in loopx_cli("self-repair", "fix").out


def test_a_lost_ledger_entry_is_repaired_in_order(loopx_registry, loopx_cli):
    """One damage, several findings: the rebuild goes first, then what it leaves behind."""
    reg = loopx_registry
    g = new_goal(reg)
    a = add_todo(reg, g, "a")
    b = add_todo(reg, g, "b", [a])
    gate = api.gates.request(reg, "user", goal_id=g, title="a ok?", blocks=f"todo:{a}")["id"]
    lost = event_of(reg, g, "todo.added", todo_id=a)
    raw(reg, ("DELETE FROM events WHERE id = ?", (lost.id,)))
    assert codes(check(reg, g)) == ["chain_broken", "ledger_drift", "ledger_gap"]
    r = fix(loopx_cli, "--goal-id", g)
    # The lost entry cannot come back, but the loss is recorded in the repair event (never hidden).
    assert r.code == 0 and r.json["ok"], r
    rebuilt = [x for x in r.json["repaired"] if x["result"].startswith("state_rebuilt")]
    assert rebuilt and all(x["lost"] == [lost.seq] for x in rebuilt)
    assert [x["code"] for x in r.json["repaired"] if x not in rebuilt] == ["missing_dependency", "dangling_gate"]
    # The loss first (the core's record, which its chain check reads), then the repairs.
    assert [e[1:] for e in repair_events(reg, g)] == [
        ("capability.loss_recorded", None), ("self_repair.repaired", "state_rebuilt"),
        ("self_repair.repaired", "dependency_dropped"), ("self_repair.repaired", "gate_widened"),
        ("capability.state_set", None)]
    with reg.read() as tx:
        assert [t.id for t in api.todos.list(tx, g)] == [b]
        assert tx.one("SELECT blocks FROM gates WHERE id = ?", (gate,))["blocks"] == "all"
        assert tx.one("SELECT seq FROM events WHERE goal_id = ? AND seq = ?", (g, lost.seq)) is None
    assert event_of(reg, g, "self_repair.repaired", repair="state_rebuilt").body["lost"] == [lost.seq]
    assert event_of(reg, g, "capability.loss_recorded").body["lost"] == [lost.seq]
    assert check(reg, g)["ok"]
    assert_replay_matches(reg, g)
    # The capability's own record of what it did, in the namespace it owns.
    assert api.state.get(reg, g, "self_repair")["last_fix"]["repaired"] == ["missing_dependency", "dangling_gate"]


def test_fix_operation_id_retry_writes_nothing_twice(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    add_todo(reg, g, "a")
    raw(reg, ("UPDATE goals SET revision = 1 WHERE id = ?", (g,)))
    first = fix(loopx_cli, "--goal-id", g, "--operation-id", "repair-1")
    after = reg_events(reg, g)
    second = fix(loopx_cli, "--goal-id", g, "--operation-id", "repair-1")
    assert second.json["repaired"] == first.json["repaired"] and reg_events(reg, g) == after


def test_fix_text_output_and_unknown_goal(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    add_todo(reg, g, "a")
    raw(reg, ("UPDATE goals SET revision = 1 WHERE id = ?", (g,)))
    r = loopx_cli("self-repair", "check")
    assert r.code == 1 and f"{g}  revision_mismatch" in r.out
    r = loopx_cli("self-repair", "fix")
    assert r.code == 0 and "-> state_rebuilt" in r.out
    r = loopx_cli("self-repair", "check", "--goal-id", "g-000000000000", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "goal_not_found"
    r = loopx_cli("self-repair", "fix", "--json", env={"LOOPX_ACTOR": "dashboard"})
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"


def test_repairs_on_a_closed_goal(loopx_registry, loopx_cli):
    reg = loopx_registry
    g = new_goal(reg)
    add_todo(reg, g, "a")
    assert loopx_cli("project-prompt", "close", "--goal-id", g, "--reason", "done", "--json").code == 0
    raw(reg, ("UPDATE goals SET revision = 1 WHERE id = ?", (g,)))
    r = fix(loopx_cli)
    assert r.json["ok"] and r.json["repaired"], r
    with reg.read() as tx:
        assert api.goals.load(tx, g).status == "closed"


def test_skill_command_prints_the_shipped_skill(loopx_cli):
    r = loopx_cli("self-repair", "skill")
    assert r.code == 0 and r.out.startswith("---\nname: loopx-self-repair")
    assert loopx_cli("self-repair", "skill", "--path").out.strip().endswith("SKILL.md")


# --- helpers that need a moment --------------------------------------------------------------


def reg_events(reg, g):
    with reg.read() as tx:
        return [(e.seq, e.kind) for e in api.goals.events(tx, g)]


def _corrupt_index(path, index, update_sql):
    """Make ``index`` disagree with its table: change rows while SQLite does not know the index."""
    con = sqlite3.connect(path)
    sql, root = con.execute("SELECT sql, rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()
    con.execute("PRAGMA writable_schema = ON")
    con.execute("DELETE FROM sqlite_master WHERE name = ?", (index,))
    con.commit()
    con.close()
    con = sqlite3.connect(path)
    con.execute(update_sql)
    con.commit()
    con.close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema = ON")
    con.execute("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('index', ?, 'todos', ?, ?)",
                (index, root, sql))
    con.commit()
    con.close()

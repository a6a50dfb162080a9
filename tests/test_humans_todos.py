"""Todos: priorities, dependencies (no cycles), the ready set, claims with leases and epochs."""

from __future__ import annotations

import pytest

from tests.factories import make_goal


@pytest.fixture
def goal(loopx):
    return make_goal(loopx, title="Quarterly revenue")["goal"]


def add(loopx, goal, text, *extra, env=None):
    r = loopx("todo", "add", "--goal-id", goal, "--text", text, *extra, "--json", env=env)
    assert r.code == 0, r
    return r.json["id"]


def ready_ids(loopx, goal, agent=None):
    args = ["todo", "list", "--goal-id", goal, "--ready", "--json"]
    if agent:
        args += ["--agent", agent]
    r = loopx(*args)
    assert r.code == 0, r
    return [t["id"] for t in r.json]


def claim(loopx, goal, todo, agent, *extra):
    return loopx("todo", "claim", "--goal-id", goal, "--todo-id", todo, "--agent", agent, *extra, "--json")


def test_ready_set_orders_by_priority_then_creation(loopx, goal):
    a = add(loopx, goal, "a")  # P2 by default
    b = add(loopx, goal, "b", "--priority", "P0")
    c = add(loopx, goal, "c", "--priority", "P2")
    d = add(loopx, goal, "d", "--priority", "P4")
    e = add(loopx, goal, "e", "--priority", "P0")
    assert ready_ids(loopx, goal) == [b, e, a, c, d]
    listed = loopx("todo", "list", "--goal-id", goal, "--json").json
    assert [t["priority"] for t in listed] == ["P0", "P0", "P2", "P2", "P4"]


def test_dependencies_hold_todos_back_until_done(loopx, goal):
    fit = add(loopx, goal, "Fit the forecast", "--priority", "P1")
    report = add(loopx, goal, "Write the report", "--depends-on", fit, "--priority", "P0")
    assert ready_ids(loopx, goal) == [fit]
    assert loopx("todo", "done", "--goal-id", goal, "--todo-id", fit, "--note", "MAPE 3%").code == 0
    assert ready_ids(loopx, goal) == [report]
    r = loopx("todo", "list", "--goal-id", goal, "--json").json
    assert {t["id"]: t["note"] for t in r}[fit] == "MAPE 3%"


def test_a_blocked_dependency_keeps_the_dependent_out(loopx, goal):
    first = add(loopx, goal, "first")
    then = add(loopx, goal, "then", "--depends-on", first)
    loopx("todo", "block", "--goal-id", goal, "--todo-id", first, "--note", "no data")
    assert ready_ids(loopx, goal) == []
    r = claim(loopx, goal, then, "a1")
    assert r.code == 2 and r.json["error"]["code"] == "todo_not_ready", r
    loopx("todo", "reopen", "--goal-id", goal, "--todo-id", first)
    assert ready_ids(loopx, goal) == [first]


def test_dependencies_must_exist_in_the_goal(loopx, goal):
    other = make_goal(loopx, title="Other")["goal"]
    foreign = add(loopx, other, "theirs")
    r = loopx("todo", "add", "--goal-id", goal, "--text", "x", "--depends-on", foreign, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "todo_not_found"
    r = loopx("todo", "add", "--goal-id", goal, "--text", "x", "--depends-on", "t-1x", "--json")  # not hex: not an id, nor a prefix of one
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    assert loopx("todo", "list", "--goal-id", goal, "--json").json == []


def test_dependency_cycles_are_refused(loopx, goal):
    a = add(loopx, goal, "a")
    b = add(loopx, goal, "b", "--depends-on", a)
    c = add(loopx, goal, "c", "--depends-on", b)
    for todo, on in ((a, c), (a, b), (a, a)):
        r = loopx("todo", "depend", "--goal-id", goal, "--todo-id", todo, "--on", on, "--json")
        assert r.code == 2 and r.json["error"]["code"] == "dependency_cycle", r
    r = loopx("todo", "depend", "--goal-id", goal, "--todo-id", c, "--on", a, "--json")
    assert r.code == 0 and r.json["depends_on"] == [b, a]
    listed = {t["id"]: t["depends_on"] for t in loopx("todo", "list", "--goal-id", goal, "--json").json}
    assert listed[a] == []


def test_gated_todo_leaves_the_ready_set_until_approved(loopx, goal):
    t = add(loopx, goal, "Publish the report")
    gate = loopx("gate", "add", "--goal-id", goal, "--title", "Publish?", "--blocks", f"todo:{t}", "--json").json
    assert ready_ids(loopx, goal) == []
    r = claim(loopx, goal, t, "a1")
    assert r.code == 2 and r.json["error"]["code"] == "gate_pending"
    loopx("gate", "approve", "--goal-id", goal, "--gate-id", gate["id"])
    assert ready_ids(loopx, goal) == [t]


def test_rejected_gate_keeps_the_todo_blocked(loopx, goal):
    t = add(loopx, goal, "Publish the report")
    gate = loopx("gate", "add", "--goal-id", goal, "--title", "Publish?", "--blocks", f"todo:{t}", "--json").json
    loopx("gate", "reject", "--goal-id", goal, "--gate-id", gate["id"], "--comment", "numbers are wrong")
    assert ready_ids(loopx, goal) == []
    r = claim(loopx, goal, t, "a1")
    assert r.code == 2 and r.json["error"]["code"] == "todo_not_ready"


def test_claims_are_exclusive_idempotent_and_hidden_from_others(loopx, goal):
    t = add(loopx, goal, "fit")
    first = claim(loopx, goal, t, "a1")
    assert first.code == 0, first
    c = first.json["claim"]
    assert c["agent"] == "a1" and c["epoch"] == 1 and first.json["epoch"] == 1
    again = claim(loopx, goal, t, "a1", "--ttl-seconds", "5000")
    assert again.code == 0
    assert again.json["claim"]["epoch"] == 1  # the same holder: no new epoch
    assert again.json["claim"]["expires_at"] > c["expires_at"]  # the lease was extended
    r = claim(loopx, goal, t, "a2")
    assert r.code == 2 and r.json["error"]["code"] == "todo_claimed"
    assert "a1" in r.json["error"]["message"]
    assert ready_ids(loopx, goal, "a1") == [t]
    assert ready_ids(loopx, goal, "a2") == []


def test_expired_lease_is_retaken_with_a_new_epoch_and_the_old_holder_loses(loopx, goal, loopx_clock):
    t = add(loopx, goal, "fit")
    old = claim(loopx, goal, t, "a1", "--ttl-seconds", "60").json
    assert claim(loopx, goal, t, "a2").json["error"]["code"] == "todo_claimed"  # the lease holds ...
    loopx_clock.advance(61)  # ... until it runs out
    taken = claim(loopx, goal, t, "a2")
    assert taken.code == 0, taken
    assert taken.json["claim"]["agent"] == "a2" and taken.json["claim"]["epoch"] == old["epoch"] + 1
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", t, "--agent", "a1", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "lease_lost", r
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", t, "--epoch", str(old["epoch"]), "--json")
    assert r.code == 2 and r.json["error"]["code"] == "lease_lost", r
    # The old holder claiming again gets todo_claimed (a2's lease is valid).
    assert claim(loopx, goal, t, "a1").json["error"]["code"] == "todo_claimed"
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", t, "--agent", "a2",
              "--epoch", str(old["epoch"] + 1), "--note", "fitted", "--json")
    assert r.code == 0 and r.json["status"] == "done" and r.json["claim"] is None


def test_holder_whose_lease_expired_unretaken_may_still_finish(loopx, goal, loopx_clock):
    t = add(loopx, goal, "fit")
    claim(loopx, goal, t, "a1", "--ttl-seconds", "60")
    loopx_clock.advance(61)
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", t, "--agent", "a1", "--json")
    assert r.code == 0 and r.json["status"] == "done"


def test_settling_requires_the_right_status(loopx, goal):
    t = add(loopx, goal, "fit")
    r = loopx("todo", "reopen", "--goal-id", goal, "--todo-id", t, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "todo_not_open"
    assert loopx("todo", "done", "--goal-id", goal, "--todo-id", t).code == 0
    for verb in ("done", "block"):
        r = loopx("todo", verb, "--goal-id", goal, "--todo-id", t, "--json")
        assert r.code == 2 and r.json["error"]["code"] == "todo_not_open"
    r = claim(loopx, goal, t, "a1")
    assert r.code == 2 and r.json["error"]["code"] == "todo_not_open"
    r = loopx("todo", "reopen", "--goal-id", goal, "--todo-id", t, "--note", "redo with Q4 data", "--json")
    assert r.code == 0 and r.json["status"] == "open" and r.json["note"] == "redo with Q4 data"


def test_reclaim_after_reopen_bumps_the_epoch(loopx, goal):
    t = add(loopx, goal, "fit")
    assert claim(loopx, goal, t, "a1").json["epoch"] == 1
    loopx("todo", "block", "--goal-id", goal, "--todo-id", t, "--agent", "a1", "--note", "waiting on data")
    loopx("todo", "reopen", "--goal-id", goal, "--todo-id", t)
    assert claim(loopx, goal, t, "a2").json["epoch"] == 2


def test_claim_input_is_validated(loopx, goal):
    t = add(loopx, goal, "fit")
    r = loopx("todo", "claim", "--goal-id", goal, "--todo-id", t, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    for ttl in ("0", "-5", "nan", "inf", "99999999"):
        r = claim(loopx, goal, t, "a1", "--ttl-seconds", ttl)
        assert r.code == 2 and r.json["error"]["code"] == "invalid_argument", (ttl, r)
    r = claim(loopx, goal, "t-000000000000", "a1")
    assert r.json["error"]["code"] == "todo_not_found"
    r = loopx("todo", "add", "--goal-id", goal, "--text", "x", "--priority", "P9", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    r = loopx("todo", "add", "--goal-id", goal, "--text", "", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def test_executor_needs_an_open_run(loopx, goal):
    env = {"LOOPX_ACTOR": "executor"}
    r = loopx("todo", "add", "--goal-id", goal, "--text", "x", "--json", env=env)
    assert r.code == 2 and r.json["error"]["code"] == "run_not_open"
    t = add(loopx, goal, "fit")
    for args in (("claim", "--agent", "a1"), ("done",), ("block",), ("reopen",)):
        r = loopx("todo", args[0], "--goal-id", goal, "--todo-id", t, *args[1:], "--json", env=env)
        assert r.code == 2 and r.json["error"]["code"] == "run_not_open", (args, r)
    r = loopx("todo", "claim", "--goal-id", goal, "--todo-id", t, "--run-id", "r-000000000000", "--json", env=env)
    assert r.code == 2 and r.json["error"]["code"] == "run_not_found"
    assert loopx("todo", "list", "--goal-id", goal, "--json").json[0]["claim"] is None


def test_count_ready_and_replay(loopx, reg, goal):
    from loopx.values import clock
    from loopx.ledger import log as ledger
    from loopx.domain import todos

    a = add(loopx, goal, "a")
    b = add(loopx, goal, "b", "--depends-on", a)
    claim(loopx, goal, a, "a1")
    loopx("todo", "done", "--goal-id", goal, "--todo-id", a, "--agent", "a1")
    loopx("todo", "depend", "--goal-id", goal, "--todo-id", b, "--on", add(loopx, goal, "c"))
    with reg.read() as tx:
        assert todos.count(tx, goal) == 3
        assert [t.text for t in todos.ready(tx, goal, agent="x", now=clock.now())] == ["c"]
        now = ledger.normalise(ledger.snapshot(tx, goal))
        assert now == ledger.normalise(ledger.replayed_snapshot(ledger.events(tx, goal)))


def test_done_under_a_stale_contract_is_still_recorded(loopx):
    """`todo done` records what happened (like evidence add): a gate added mid-turn does not
    stop the agent from marking its finished step, while a new claim is refused."""
    goal = make_goal(loopx, title="g")["goal"]
    first = loopx("todo", "add", "--goal-id", goal, "--text", "one", "--json").json["id"]
    second = loopx("todo", "add", "--goal-id", goal, "--text", "two", "--json").json["id"]
    contract = loopx("quota", "should-run", "--goal-id", goal, "--agent", "a1", "--json").json
    run = contract["interaction_contract"]["run_id"]
    ex = {"LOOPX_ACTOR": "executor"}
    assert loopx("todo", "claim", "--goal-id", goal, "--todo-id", first, "--run-id", run, "--json", env=ex).code == 0
    assert loopx("gate", "add", "--goal-id", goal, "--title", "stop", "--scope", "safety").code == 0
    stale = loopx("todo", "claim", "--goal-id", goal, "--todo-id", second, "--run-id", run, "--json", env=ex)
    assert stale.code == 2 and stale.json["error"]["code"] == "contract_stale"
    done = loopx("todo", "done", "--goal-id", goal, "--todo-id", first, "--run-id", run, "--json", env=ex)
    assert done.code == 0, done
    assert done.json["status"] == "done"


def test_on_a_closed_goal_only_the_open_run_may_still_mark_its_todo_done(loopx, goal):
    # A step of a run can close the goal (Issue-Fix's publish does); the run then records its todo.
    first, second = add(loopx, goal, "publish"), add(loopx, goal, "tidy up")
    agent = {"LOOPX_ACTOR": "executor"}
    run = loopx("quota", "should-run", "--goal-id", goal, "--json", env=agent).json["interaction_contract"]["run_id"]
    r = loopx("todo", "claim", "--goal-id", goal, "--todo-id", first, "--run-id", run, "--json", env=agent)
    assert r.code == 0, r
    assert loopx("project_prompt", "close", "--goal-id", goal).code == 0
    r = loopx("todo", "block", "--goal-id", goal, "--todo-id", first, "--run-id", run, "--json", env=agent)
    assert r.code == 2 and r.json["error"]["code"] == "goal_closed"
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", first, "--run-id", run, "--json", env=agent)
    assert r.code == 0 and r.json["status"] == "done", r
    assert loopx("run", "finish", "--run-id", run, env=agent).code == 0
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", second, "--run-id", run, "--json", env=agent)
    assert r.code == 2 and r.json["error"]["code"] == "run_not_open"
    r = loopx("todo", "done", "--goal-id", goal, "--todo-id", second, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "goal_closed"


def test_summary_all_names_a_claimant_only_while_the_claim_holds(loopx, goal):
    todo = add(loopx, goal, "the work")
    r = loopx("quota", "should-run", "--goal-id", goal, "--agent", "bot", "--json")
    run = r.json["interaction_contract"]["run_id"]
    assert claim(loopx, goal, todo, "bot", "--run-id", run).code == 0

    def shown():
        text = loopx("summary-all", "--goal-id", goal).out
        entry = loopx("summary-all", "--goal-id", goal, "--json").json["goals"][0]["todos"]["open"][0]
        return [line for line in text.splitlines() if todo in line], entry["claim_holds"]

    assert shown() == ([f"    P2 {todo} the work  [bot]"], True)
    assert loopx("run", "finish", "--run-id", run, "--outcome", "failed").code == 0
    # The failed run's claim stays on the row (its lease has not run out) but holds nothing.
    assert shown() == ([f"    P2 {todo} the work"], False)

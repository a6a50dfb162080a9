"""Gates: anyone may ask, only a user decides; decisions are recorded; what a gate blocks is validated."""

from __future__ import annotations

import pytest

from tests.factories import make_goal

EXECUTOR = {"LOOPX_ACTOR": "executor"}


@pytest.fixture
def goal(loopx):
    return make_goal(loopx, title="Quarterly revenue")["goal"]


def add_gate(loopx, goal, *extra, env=None):
    return loopx("gate", "add", "--goal-id", goal, "--title", "Publish the report", "--scope", "production",
                 *extra, "--json", env=env)


def test_add_then_approve_records_who_when_and_comment(loopx, goal):
    r = add_gate(loopx, goal)
    assert r.code == 0, r
    gate = r.json
    assert gate["status"] == "pending" and gate["blocks"] == "all" and gate["requested_by"] == "user"
    r = loopx("gate", "approve", "--goal-id", goal, "--gate-id", gate["id"], "--comment", "ship it", "--json")
    assert r.code == 0, r
    decided = r.json
    assert decided["status"] == "approved"
    assert decided["decided_by"] == "user" and decided["comment"] == "ship it"
    assert decided["decided_at"] >= gate["created_at"]
    assert loopx("gate", "list", "--goal-id", goal, "--pending", "--json").json == []
    assert [g["id"] for g in loopx("gate", "list", "--goal-id", goal, "--json").json] == [gate["id"]]


def test_text_output_names_the_exact_decision_commands(loopx, goal):
    r = loopx("gate", "add", "--goal-id", goal, "--title", "Publish")
    assert r.code == 0, r
    gate_id = r.out.split()[0]
    assert f"loopx gate approve --goal-id {goal} --gate-id {gate_id}" in r.out
    assert f"loopx gate reject --goal-id {goal} --gate-id {gate_id}" in r.out


def test_executor_may_ask_but_not_decide(loopx, goal):
    r = add_gate(loopx, goal, env=EXECUTOR)
    assert r.code == 0, r
    gate = r.json
    assert gate["requested_by"] == "executor"
    for verb in ("approve", "reject"):
        r = loopx("gate", verb, "--goal-id", goal, "--gate-id", gate["id"], "--json", env=EXECUTOR)
        assert r.code == 2
        assert r.json["error"]["code"] == "actor_forbidden"
        assert "only a user" in r.json["error"]["message"]
    # Nothing was decided.
    assert loopx("gate", "list", "--goal-id", goal, "--pending", "--json").json[0]["id"] == gate["id"]


def test_event_kind_writers_enforce_user_only_decisions(reg):
    """Even a caller that skips the friendly check cannot write a decision event as an executor."""
    from loopx.values.errors import LoopxError

    goal = make_goal(reg, title="T")["goal"]

    def work(w):
        w.emit("gate.added", {"gate_id": "x-000000000001", "title": "t", "scope": "other", "blocks": "all"})
        w.emit("gate.approved", {"gate_id": "x-000000000001"})

    with pytest.raises(LoopxError) as err:
        reg.mutate("executor", work, goal_id=goal)
    assert err.value.code == "actor_forbidden"
    with reg.read() as tx:
        assert tx.query("SELECT * FROM gates WHERE goal_id = ?", (goal,)) == []


def test_deciding_twice_is_refused(loopx, goal):
    gate = add_gate(loopx, goal).json
    assert loopx("gate", "reject", "--goal-id", goal, "--gate-id", gate["id"], "--comment", "no").code == 0
    for verb in ("approve", "reject"):
        r = loopx("gate", verb, "--goal-id", goal, "--gate-id", gate["id"], "--json")
        assert r.code == 2 and r.json["error"]["code"] == "gate_decided", r
    g = loopx("gate", "list", "--goal-id", goal, "--json").json[0]
    assert g["status"] == "rejected" and g["comment"] == "no"


def test_operation_id_retry_of_a_decision_returns_the_first_result(loopx, goal):
    gate = add_gate(loopx, goal).json
    args = ("gate", "approve", "--goal-id", goal, "--gate-id", gate["id"], "--operation-id", "op-1", "--json")
    first = loopx(*args)
    again = loopx(*args)
    assert first.code == again.code == 0
    assert first.json == again.json


@pytest.mark.parametrize("blocks", ["everything", "action:", "action:Bad Name", "todo:t-123", "todo:", "gate:x"])
def test_bad_blocks_are_refused(loopx, goal, blocks):
    r = add_gate(loopx, goal, "--blocks", blocks)
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument", r


def test_blocked_targets_must_exist_in_that_goal(loopx, goal):
    other = make_goal(loopx, title="Other")["goal"]
    foreign = loopx("todo", "add", "--goal-id", other, "--text", "theirs", "--json").json["id"]
    r = add_gate(loopx, goal, "--blocks", f"todo:{foreign}")
    assert r.code == 2 and r.json["error"]["code"] == "todo_not_found"
    r = add_gate(loopx, goal, "--blocks", "action:publish")
    assert r.code == 2 and r.json["error"]["code"] == "action_not_found"
    mine = loopx("todo", "add", "--goal-id", goal, "--text", "mine", "--json").json["id"]
    r = add_gate(loopx, goal, "--blocks", f"todo:{mine}")
    assert r.code == 0 and r.json["blocks"] == f"todo:{mine}"


def test_gate_ids_and_goals_are_checked(loopx, goal):
    r = loopx("gate", "approve", "--goal-id", goal, "--gate-id", "x-000000000000", "--json")
    assert r.json["error"]["code"] == "gate_not_found"
    r = loopx("gate", "approve", "--goal-id", goal, "--gate-id", "nope", "--json")
    assert r.json["error"]["code"] == "invalid_argument"
    r = add_gate(loopx, "g-000000000000")
    assert r.json["error"]["code"] == "goal_not_found"
    gate = add_gate(loopx, goal).json
    other = make_goal(loopx, title="Other")["goal"]
    r = loopx("gate", "approve", "--goal-id", other, "--gate-id", gate["id"], "--json")
    assert r.json["error"]["code"] == "gate_not_found"


def test_scope_and_title_are_validated(loopx, goal):
    r = loopx("gate", "add", "--goal-id", goal, "--title", "x", "--scope", "fun", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    r = loopx("gate", "add", "--goal-id", goal, "--title", "   ", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    r = loopx("gate", "add", "--goal-id", goal, "--title", "t" * 201, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def test_closed_goal_takes_no_gates(loopx, goal):
    assert loopx("project_prompt", "close", "--goal-id", goal).code == 0
    r = add_gate(loopx, goal)
    assert r.json["error"]["code"] == "goal_closed"


def test_blocking_groups_unapproved_gates_by_target(loopx, reg, goal):
    from loopx.domain import gates

    t1 = loopx("todo", "add", "--goal-id", goal, "--text", "one", "--json").json["id"]
    g_all = add_gate(loopx, goal).json
    g_todo = add_gate(loopx, goal, "--blocks", f"todo:{t1}").json
    g_ok = add_gate(loopx, goal, "--blocks", "all").json
    loopx("gate", "approve", "--goal-id", goal, "--gate-id", g_ok["id"])
    loopx("gate", "reject", "--goal-id", goal, "--gate-id", g_todo["id"], "--comment", "not this one")
    with reg.read() as tx:
        b = gates.blocking(tx, goal)
        assert [g.id for g in b["all"]] == [g_all["id"]]
        assert b["actions"] == {}
        assert b["todos"][t1].id == g_todo["id"] and b["todos"][t1].comment == "not this one"
        assert [g.id for g in gates.list_gates(tx, goal, pending_only=True)] == [g_all["id"]]
        assert len(gates.list_gates(tx, goal)) == 3


def test_replayed_ledger_equals_current_state(loopx, reg, goal):
    from loopx.ledger import log as ledger

    t1 = loopx("todo", "add", "--goal-id", goal, "--text", "one", "--json").json["id"]
    g = add_gate(loopx, goal, "--blocks", f"todo:{t1}").json
    loopx("gate", "reject", "--goal-id", goal, "--gate-id", g["id"], "--comment", "no")
    add_gate(loopx, goal, env=EXECUTOR)
    with reg.read() as tx:
        now = ledger.normalise(ledger.snapshot(tx, goal))
        replayed = ledger.normalise(ledger.replayed_snapshot(ledger.events(tx, goal)))
    assert now == replayed


def test_gate_on_an_action_keeps_it_out_of_contracts_until_approved(loopx, goal):
    assert loopx("action", "add", "--goal-id", goal, "--name", "publish", "--json", "--", "true").code == 0
    assert loopx("action", "add", "--goal-id", goal, "--name", "test", "--json", "--", "true").code == 0
    gate = add_gate(loopx, goal, "--blocks", "action:publish").json
    doc = loopx("quota", "should-run", "--goal-id", goal, "--agent", "a1", "--json").json
    assert doc["decision"] == "run", doc
    actions = doc["interaction_contract"]["cli_channel"]["next_cli_actions"]
    run_id = doc["interaction_contract"]["run_id"]
    assert any("--action test" in a for a in actions)
    assert not any("--action publish" in a for a in actions)
    r = loopx("exec", "--run-id", run_id, "--action", "publish", "--json", env=EXECUTOR)
    assert r.code == 2 and r.json["error"]["code"] == "action_not_allowed", r
    assert loopx("gate", "approve", "--goal-id", goal, "--gate-id", gate["id"]).code == 0
    doc = loopx("quota", "should-run", "--goal-id", goal, "--agent", "a1", "--json").json
    assert any("--action publish" in a for a in doc["interaction_contract"]["cli_channel"]["next_cli_actions"])


def test_rejection_comment_reaches_the_agent_and_the_target_stays_blocked(loopx, goal):
    t = loopx("todo", "add", "--goal-id", goal, "--text", "Email the CFO", "--json").json["id"]
    loopx("todo", "add", "--goal-id", goal, "--text", "Fit the forecast", "--json")
    gate = add_gate(loopx, goal, "--blocks", f"todo:{t}").json
    loopx("gate", "reject", "--goal-id", goal, "--gate-id", gate["id"], "--comment", "never email the CFO directly")
    doc = loopx("quota", "should-run", "--goal-id", goal, "--agent", "a1", "--json").json
    agent = doc["interaction_contract"]["agent_channel"]
    assert t not in [x["id"] for x in agent["ready_todos"]]
    assert any("never email the CFO directly" in n for n in agent.get("notes", [])), agent


def test_pending_gate_on_all_asks_the_user_with_exact_commands(loopx, goal):
    loopx("todo", "add", "--goal-id", goal, "--text", "Fit the forecast")
    gate = add_gate(loopx, goal).json
    doc = loopx("quota", "should-run", "--goal-id", goal, "--json").json
    assert doc["decision"] == "ask_user" and "gate_pending" in doc["reasons"]
    c = doc["interaction_contract"]
    from loopx.domain.gates import decision_commands
    from loopx.model import Gate, from_json

    for cmd in decision_commands(from_json(gate, Gate)):
        assert cmd in c["user_channel"]["next_user_actions"]
    assert not any("gate approve" in a for a in c["cli_channel"]["next_cli_actions"])

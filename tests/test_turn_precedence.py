"""The precedence table of ``quota should-run``, pinned row by row.

Each row is tested with every lower-precedence condition *also* present, so a row wins only
because it comes first: closed -> paused -> repair -> gate -> quota -> repeated failure ->
cadence -> turn in progress -> no ready work -> run.
"""

from __future__ import annotations

import pytest

from loopx import hookimpl
from loopx.views import quota
from loopx.domain import todos
from loopx.domain import goals as project_prompt
from tests.test_turn_helpers import PY, add_gate, ask, decide_gate, make_goal, plugin


class Veto:
    """A capability that vetoes the goals it is told about."""

    def __init__(self, goal_ids):
        self.goal_ids = set(goal_ids)

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        if goal.id in self.goal_ids:
            return {"reason": "ledger_mismatch", "message": "State needs repair first.",
                    "actions": [f"loopx capabilities show --name self_repair --goal-id {goal.id}"]}
        return None


# (name, expected decision, expected first reason), highest precedence first.
TABLE = [
    ("closed", "stop", "goal_closed"),
    ("paused", "wait", "goal_paused"),
    ("veto", "repair", "ledger_mismatch"),
    ("gate", "ask_user", "gate_pending"),
    ("quota", "ask_user", "quota_exhausted"),
    ("stuck", "ask_user", "repeated_failure"),
    ("cadence", "wait", "cadence"),
    ("in_progress", "wait", "run_in_progress"),
    ("no_ready", "ask_user", "no_ready_work"),
]
NAMES = [row[0] for row in TABLE]


def build(reg, upto: str):
    """A goal where condition ``upto`` and every condition below it in the table hold."""
    active = set(NAMES[NAMES.index(upto):])
    ids = make_goal(reg, todo_texts=("only step",), acts={"boom": [PY, "-c", "raise SystemExit(3)"]})
    g, t = ids["goal"], ids["todos"][0]
    # An earlier run whose step failed (one failed run is "stuck" only with --stuck-after 1).
    from loopx.domain import actions, runs

    prior = ask(reg, g, agent="prior")["interaction_contract"]["run_id"]
    actions.execute(reg, "executor", run_id=prior, action="boom")
    assert runs.finish(reg, "user", run_id=prior)["outcome"] == "failed"
    # Another agent's run, opened while there was work; then the work is done by the user.
    other = ask(reg, g, agent="other")
    assert other["decision"] == "run"
    if "no_ready" in active:
        todos.settle(reg, "user", "done", goal_id=g, todo_id=t)
    if "in_progress" not in active:
        from loopx.domain import runs

        runs.finish(reg, "user", run_id=other["interaction_contract"]["run_id"], outcome="partial")
    if "cadence" in active:
        quota.set_limits(reg, "user", goal_id=g, values={"cadence_seconds": 3600})
    if "stuck" in active:
        quota.set_limits(reg, "user", goal_id=g, values={"stuck_after": 1})
    if "quota" in active:
        quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 2})
    if "gate" in active:
        add_gate(reg, g)
    if "paused" in active:
        project_prompt.transition(reg, "user", "pause", g)
    if "closed" in active:
        project_prompt.transition(reg, "user", "close", g)
    return g


@pytest.mark.parametrize("name,decision,reason", TABLE, ids=NAMES)
def test_precedence_row_wins_over_every_lower_row(reg, name, decision, reason):
    g = build(reg, name)
    with plugin(Veto([g] if name in NAMES[: NAMES.index("veto") + 1] else []), "test-veto"):
        out = ask(reg, g)
    assert (out["decision"], out["reasons"][0]) == (decision, reason), out
    assert out["should_run"] is False
    assert out["interaction_contract"]["run_id"] is None  # no run was opened for "me"
    if name == "veto":
        assert out["interaction_contract"]["cli_channel"]["next_cli_actions"] == [
            f"loopx capabilities show --name self_repair --goal-id {g}"]


def test_without_any_condition_the_decision_is_run(reg):
    g = make_goal(reg)["goal"]
    out = ask(reg, g)
    assert (out["decision"], out["reasons"], out["should_run"]) == ("run", ["ready_work"], True)


def test_a_goal_without_todos_gets_a_planning_run(reg):
    g = make_goal(reg, todo_texts=())["goal"]
    out = ask(reg, g)
    assert (out["decision"], out["reasons"]) == ("run", ["no_todos"])
    c = out["interaction_contract"]
    r = c["run_id"]
    # No placeholder todo: the agent writes the plan in its own words; the lines only finish.
    assert c["cli_channel"]["next_cli_actions"] == [f"loopx run finish --run-id {r} --agent me"]
    assert f"loopx todo add --goal-id {g} --run-id {r} --text TEXT" in c["agent_channel"]["primary_action"]


def test_quota_reasons_name_the_exhausted_budgets_and_the_grant_command(reg):
    g = make_goal(reg, limits={"max_turns": 1, "max_tokens": 100})["goal"]
    from loopx.domain import runs

    first = ask(reg, g)
    runs.finish(reg, "user", run_id=first["interaction_contract"]["run_id"], outcome="ok", tokens=150)
    out = ask(reg, g)
    assert out["decision"] == "ask_user"
    assert out["reasons"] == ["quota_exhausted", "turns_exhausted", "tokens_exhausted"]
    user = out["interaction_contract"]["user_channel"]
    assert user["action_required"] is True
    assert f"loopx quota grant --goal-id {g} --turns 1" in user["next_user_actions"]
    assert f"loopx quota grant --goal-id {g} --tokens 100" in user["next_user_actions"]
    # Budget decisions are never the agent's: nothing in its channel.
    assert out["interaction_contract"]["cli_channel"]["next_cli_actions"] == []


def test_a_rejected_gate_on_the_goal_asks_the_user_and_its_comment_reaches_the_agent(reg):
    g = make_goal(reg)["goal"]
    gate = add_gate(reg, g, title="Touches production")
    decide_gate(reg, g, gate["id"], "reject", comment="Not this quarter")
    out = ask(reg, g)
    assert (out["decision"], out["reasons"]) == ("ask_user", ["gate_rejected"])
    c = out["interaction_contract"]
    assert c["gates"]["pending"][0]["comment"] == "Not this quarter"
    assert any("Not this quarter" in n for n in c["agent_channel"]["notes"])
    # A decided gate offers no approve/reject commands (deciding twice is refused).
    assert not any("gate approve" in a for a in c["user_channel"]["next_user_actions"])


def test_pending_gate_lists_approve_and_reject_only_in_the_user_channel(reg):
    g = make_goal(reg)["goal"]
    gate = add_gate(reg, g)
    c = ask(reg, g)["interaction_contract"]
    approve = f"loopx gate approve --goal-id {g} --gate-id {gate['id']}"
    assert approve in c["user_channel"]["next_user_actions"]
    assert not any("gate " in a for a in c["cli_channel"]["next_cli_actions"])


def test_gated_actions_stay_out_of_contracts_until_approved(reg):
    ids = make_goal(reg, acts={"test": [PY, "-c", "pass"], "deploy": [PY, "-c", "pass"]})
    g = ids["goal"]
    gate = add_gate(reg, g, blocks="action:deploy", title="Deploy", scope="production")
    c = ask(reg, g)["interaction_contract"]
    r = c["run_id"]
    acts = c["cli_channel"]["next_cli_actions"]
    assert f"loopx exec --run-id {r} --agent me --action test" in acts
    assert not any("deploy" in a for a in acts)
    assert c["gates"]["pending"][0]["id"] == gate["id"]
    decide_gate(reg, g, gate["id"])
    # The approval changed the goal's fingerprint: the same agent gets its run back, renewed.
    again = ask(reg, g)["interaction_contract"]
    assert again["run_id"] == r and again["contract_id"] != c["contract_id"]
    assert f"loopx exec --run-id {r} --agent me --action deploy" in again["cli_channel"]["next_cli_actions"]


def test_action_added_behind_a_gate_id_waits_for_that_gate(reg):
    from loopx.domain import actions

    g = make_goal(reg)["goal"]
    # A gate on a todo of this goal, also holding an action: --gate-id links any gate of the goal.
    t2 = todos.add(reg, "user", goal_id=g, text="second")["id"]
    gate = add_gate(reg, g, blocks=f"todo:{t2}", title="Second step is risky")
    actions.add(reg, "user", goal_id=g, name="publish", argv=[PY, "-c", "pass"], gate_id=gate["id"])
    acts = ask(reg, g)["interaction_contract"]["cli_channel"]["next_cli_actions"]
    assert not any("publish" in a for a in acts)
    decide_gate(reg, g, gate["id"])
    acts = ask(reg, g)["interaction_contract"]["cli_channel"]["next_cli_actions"]
    assert any(a.endswith("--action publish") for a in acts)


def test_parallel_goals_let_a_second_agent_run(reg):
    g = make_goal(reg, parallel=True, todo_texts=("a", "b"))["goal"]
    one, two = ask(reg, g, agent="one"), ask(reg, g, agent="two")
    assert one["decision"] == two["decision"] == "run"
    assert one["interaction_contract"]["run_id"] != two["interaction_contract"]["run_id"]
    serial = make_goal(reg, todo_texts=("a", "b"))["goal"]
    assert ask(reg, serial, agent="one")["decision"] == "run"
    out = ask(reg, serial, agent="two")
    assert (out["decision"], out["reasons"]) == ("wait", ["run_in_progress"])
    assert "next_eligible_at" in out["interaction_contract"]


class Sloppy:
    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        return {"reason": "Something Broke!", "message": "broken", "actions": []}


def test_a_veto_without_a_code_reason_gets_a_stable_one(reg):
    g = make_goal(reg)["goal"]
    with plugin(Sloppy(), "test-sloppy"):
        out = ask(reg, g)
    assert (out["decision"], out["reasons"]) == ("repair", ["capability_veto"])
    assert out["interaction_contract"]["agent_channel"]["primary_action"] == "broken"

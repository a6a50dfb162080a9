"""Capabilities in contracts: quota needs decide what is offered; a veto makes the decision ``repair``."""

import shlex

from loopx import hookimpl
from loopx.seam.capabilities import Capability
from tests.factories import make_goal


class Contributor:
    """Two capabilities contributing one action each to ``run`` contracts."""

    @hookimpl
    def loopx_register_capabilities(self, register):
        register(Capability(name="hungry", version="1", summary="Needs a lot.", owns=["hungry"],
                            quota={"turns": 2, "tokens": 5000, "wall_seconds": 0}, actions=["feast"]))
        register(Capability(name="frugal", version="1", summary="Needs one turn.", owns=["frugal"],
                            quota={"turns": 1}, actions=["nibble"]))

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [
            {"command": f"loopx hungry feast --goal-id {goal.id}", "note": "eat", "capability": "hungry", "action": "feast"},
            {"command": f"loopx frugal nibble --goal-id {goal.id}", "capability": "frugal", "action": "nibble"},
        ]


def actions(loopx, goal_id, agent):
    r = loopx("quota", "should-run", "--goal-id", goal_id, "--agent", agent, "--json")
    assert r.code == 0, r
    assert r.json["decision"] == "run", r.json
    # A capability's command is a do step: `loopx exec --run-id R --agent A -- <its argv>`.
    steps = r.json["interaction_contract"]["cli_channel"]["steps"]
    return [shlex.join(s["argv"][s["argv"].index("--") + 1:]) for s in steps if "--" in s["argv"]]


def test_every_capability_is_offered_when_the_budget_allows(loopx, loopx_plugin):
    loopx_plugin(Contributor())
    g = make_goal(loopx, title="T", capabilities=("hungry", "frugal"))["goal"]
    got = actions(loopx, g, "a1")
    assert f"loopx hungry feast --goal-id {g}" in got and f"loopx frugal nibble --goal-id {g}" in got


def test_capability_needing_more_than_remains_is_not_offered(loopx, loopx_plugin):
    loopx_plugin(Contributor())
    g = make_goal(loopx, title="T", capabilities=("hungry", "frugal"))["goal"]
    assert loopx("quota", "set", "--goal-id", g, "--max-tokens", "4000", "--json").code == 0
    got = actions(loopx, g, "a1")
    assert f"loopx hungry feast --goal-id {g}" not in got
    assert f"loopx frugal nibble --goal-id {g}" in got


def test_turn_needs_count_the_run_itself(loopx, loopx_plugin):
    # One turn left: the run being opened is it. "frugal" (1 turn) fits; "hungry" (2) does not.
    loopx_plugin(Contributor())
    g = make_goal(loopx, title="T", capabilities=("hungry", "frugal"))["goal"]
    assert loopx("quota", "set", "--goal-id", g, "--max-turns", "1", "--json").code == 0
    got = actions(loopx, g, "a1")
    assert f"loopx frugal nibble --goal-id {g}" in got
    assert f"loopx hungry feast --goal-id {g}" not in got
    assert not any("hungry" in c for c in got)


class Vetoes:
    def __init__(self):
        self.calls = 0

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        self.calls += 1
        return {"reason": "needs_repair", "message": "broken", "actions": [f"loopx fixit --goal-id {goal.id}"]}


def test_a_veto_makes_the_decision_repair_with_its_actions(loopx, loopx_plugin):
    loopx_plugin(Contributor())
    veto = loopx_plugin(Vetoes())
    g = make_goal(loopx, title="T", capabilities=("hungry", "frugal"))["goal"]
    r = loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json")
    assert r.code == 0, r
    assert r.json["decision"] == "repair" and r.json["reasons"] == ["needs_repair"]
    assert r.json["interaction_contract"]["cli_channel"]["next_cli_actions"] == [f"loopx fixit --goal-id {g}"]
    assert veto.calls >= 1

"""No dead end at the publish gate: a rejected publish goes back to fix with verify in the contract.

Through the CLI on a real git repository: the user's ``gate reject`` writes, in its own
transaction, Issue-Fix's part of it (``loopx_gate_decided``), so the very next ``quota
should-run`` offers verify; the fixed code verified again is handed off under a new gate and
published; ``gate reopen`` of a rejection nobody acted on yet puts the hand-off back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from issue_fix_helpers import git, origin_of
from test_issue_fix import contract, only, state, step, to_publish


def _todo_status(cli, g) -> dict:
    return {t["id"]: t for t in cli("todo", "list", "--goal-id", g, "--json").json}


@pytest.mark.slow
def test_a_rejected_publish_gate_returns_the_goal_to_fix_with_verify_in_the_contract(handed_off_goal):
    cli, project = handed_off_goal.cli, handed_off_goal.project
    out, s = handed_off_goal.start, state(cli, handed_off_goal.goal_id)
    g, gate, commit = out["goal_id"], s["publish_gate"], s["verification"]["commit"]
    old_publish = s["todos"]["publish"]
    doc = contract(cli, g)
    assert doc["decision"] == "ask_user"
    # At the gate the decision comes first, saying what approving publishes; closing is not offered.
    needs = cli("status", g, "--json").json["needs_you"]
    assert needs["reason"] == "gate_pending", needs
    assert needs["commands"][:2] == [f"loopx gate approve --goal-id {g} --gate-id {gate}",
                                     f"loopx gate reject --goal-id {g} --gate-id {gate} --comment why"], needs
    assert not any("close" in c for c in needs["commands"]), needs
    [decision] = needs["decisions"]
    assert f"approving pushes verified commit {commit[:12]} to origin/{out['branch']}" in decision["title"]
    assert f"approving pushes verified commit {commit[:12]} to origin/{out['branch']}" in cli("status", g).out
    r = cli("gate", "reject", "--goal-id", g, "--gate-id", gate, "--comment", "name the root cause better")
    assert r.code == 0, r

    # The very next should-run says run, and its one step is verify; its note carries the comment.
    doc = contract(cli, g)
    assert doc["decision"] == "run", doc
    assert only(doc, "loopx issue-fix ").startswith("loopx issue-fix verify --run-id ")
    notes = " ".join(doc["interaction_contract"]["agent_channel"].get("notes") or []) + " " + repr(doc)
    assert "name the root cause better" in notes
    s = state(cli, g)
    assert s["phase"] == "fix" and s["publish_gate"] is None and s["verification"] is None
    assert s["todo_status"] == {"reproduce": "done", "fix": "open", "verify": "open", "handoff": "open",
                                "publish": "open"}
    todos = _todo_status(cli, g)
    # The rejected publish is set aside (never done), a new publish todo waits for the next hand-off.
    assert todos[old_publish]["status"] == "blocked" and s["todos"]["publish"] != old_publish
    assert s["log"][-1]["outcome"] == "gate_rejected"

    # Verify (the same fixed code), hand off again: a new gate, for the newly verified commit.
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    step(cli, g, "--root-cause", "add() subtracted: the operator was wrong")
    s = state(cli, g)
    assert s["phase"] == "publish" and s["publish_gate"] not in (None, gate)
    assert contract(cli, g)["decision"] == "ask_user"
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    r, doc = step(cli, g)
    assert only(doc, "loopx issue-fix ").startswith("loopx issue-fix publish --run-id ")
    new_commit = s["verification"]["commit"]
    assert git(origin_of(project), "rev-parse", f"refs/heads/{out['branch']}") == new_commit
    s = state(cli, g)
    assert s["status"] == "closed" and s["phase"] == "published"


@pytest.mark.slow
def test_reopening_the_rejected_publish_gate_puts_the_handoff_back(handed_off_goal):
    cli, project = handed_off_goal.cli, handed_off_goal.project
    out, s = handed_off_goal.start, state(cli, handed_off_goal.goal_id)
    g, gate, commit = out["goal_id"], s["publish_gate"], s["verification"]["commit"]
    publish_todo = s["todos"]["publish"]
    assert cli("gate", "reject", "--goal-id", g, "--gate-id", gate).code == 0
    assert state(cli, g)["phase"] == "fix"
    assert cli("gate", "reopen", "--goal-id", g, "--gate-id", gate).code == 0
    s = state(cli, g)
    assert s["phase"] == "publish" and s["publish_gate"] == gate and s["verification"]["commit"] == commit
    assert s["todos"]["publish"] == publish_todo
    assert s["todo_status"] == {"reproduce": "done", "fix": "done", "verify": "done", "handoff": "done",
                                "publish": "open"}
    doc = contract(cli, g)
    assert doc["decision"] == "ask_user" and doc["reasons"][0] == "gate_pending", doc
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate).code == 0
    step(cli, g)
    assert git(origin_of(project), "rev-parse", f"refs/heads/{out['branch']}") == commit
    assert state(cli, g)["status"] == "closed"


@pytest.mark.slow
def test_a_failing_gate_decided_hook_refuses_the_decision_and_writes_nothing(handed_off_goal, monkeypatch):
    cli, project = handed_off_goal.cli, handed_off_goal.project
    out, s = handed_off_goal.start, state(cli, handed_off_goal.goal_id)
    g, gate = out["goal_id"], s["publish_gate"]
    import loopx_issue_fix.rejection as rejection

    def broken(w, gate, decision):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(rejection, "gate_decided", broken)
    r = cli("gate", "reject", "--goal-id", g, "--gate-id", gate, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "plugin_error", r
    assert "issue_fix" in r.json["error"]["message"] and "nothing changed" in r.json["error"]["message"]
    [row] = [x for x in cli("gate", "list", "--goal-id", g, "--json").json if x["id"] == gate]
    assert row["status"] == "pending" and state(cli, g)["phase"] == "publish"

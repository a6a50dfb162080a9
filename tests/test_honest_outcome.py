"""Recording the truth: ``run finish`` derives its outcome from the steps' own evidence, ``todo
done`` refuses over a failed step, and the same step failing run after run asks a user."""

from __future__ import annotations

import json
import sys


PY = sys.executable
EX = {"LOOPX_ACTOR": "executor"}


def J(r):
    assert r.code == 0, r
    return r.json


def setup(loopx, acts, *, agent="a1"):
    g = J(loopx("project_prompt", "create", "--title", "Outcome", "--json"))["id"]
    for name, code in acts.items():
        J(loopx("action", "add", "--goal-id", g, "--name", name, "--json", "--", PY, "-c",
                f"print('{name} output line'); raise SystemExit({code})"))
    t = J(loopx("todo", "add", "--goal-id", g, "--text", "work", "--json"))["id"]
    c = J(loopx("quota", "should-run", "--goal-id", g, "--agent", agent, "--json", env=EX))["interaction_contract"]
    J(loopx("todo", "claim", "--goal-id", g, "--todo-id", t, "--run-id", c["run_id"], "--json", env=EX))
    return g, t, c["run_id"]


def test_finish_without_outcome_records_ok_only_when_every_step_succeeded(loopx):
    _g, _t, run = setup(loopx, {"a": 0, "b": 0})
    assert loopx("exec", "--run-id", run, "--action", "a", env=EX).code == 0
    # b never ran: the evidence does not support ok.
    out = J(loopx("run", "finish", "--run-id", run, "--json", env=EX))
    assert out["outcome"] == "failed" and "step action:b has not run" in out["handoff"]
    _g, _t, run = setup(loopx, {"a": 0, "b": 0})
    for name in ("a", "b"):
        assert loopx("exec", "--run-id", run, "--action", name, env=EX).code == 0
    assert J(loopx("run", "finish", "--run-id", run, "--json", env=EX))["outcome"] == "ok"


def test_ok_against_failed_evidence_is_refused_unless_forced_with_a_reason(loopx):
    g, t, run = setup(loopx, {"test": 5})
    assert loopx("exec", "--run-id", run, "--action", "test", env=EX).code == 1
    r = loopx("run", "finish", "--run-id", run, "--outcome", "ok", "--json", env=EX)
    assert r.code == 2 and r.json["error"]["code"] == "outcome_contradicts_evidence", r
    assert "step action:test failed (exit 5)" in r.json["error"]["message"]
    assert J(loopx("run", "show", "--run-id", run, "--json"))["status"] == "open"
    # failed and partial never claim success: always accepted. ok needs a recorded reason.
    r = loopx("run", "finish", "--run-id", run, "--outcome", "ok", "--force-outcome", "known flaky test, see #12",
              "--json", env=EX)
    assert r.code == 0 and r.json["outcome"] == "ok", r
    forced = [e for e in J(loopx("evidence", "list", "--run-id", run, "--json")) if e["kind"] == "outcome_forced"]
    assert len(forced) == 1 and forced[0]["data"]["reason"] == "known flaky test, see #12"
    assert forced[0]["data"]["by"] == "executor" and forced[0]["actor"] == "core"
    finished = [e for e in J(loopx("history", "--goal-id", g, "--json")) if e["kind"] == "run.finished"]
    assert finished[-1]["body"]["forced"] == "known flaky test, see #12"
    bad = loopx("run", "finish", "--run-id", run, "--outcome", "failed", "--force-outcome", "x", "--json")
    assert bad.code == 2 and bad.json["error"]["code"] in ("invalid_argument", "run_not_open")


def test_todo_done_is_refused_while_a_step_failed_or_has_not_run(loopx):
    g, t, run = setup(loopx, {"test": 5})
    r = loopx("todo", "done", "--goal-id", g, "--todo-id", t, "--run-id", run, "--json", env=EX)
    assert r.code == 2 and r.json["error"]["code"] == "step_failed" and "has not run" in r.json["error"]["message"]
    assert loopx("exec", "--run-id", run, "--action", "test", env=EX).code == 1
    r = loopx("todo", "done", "--goal-id", g, "--todo-id", t, "--run-id", run, "--json", env=EX)
    assert r.code == 2 and r.json["error"]["code"] == "step_failed" and "failed (exit 5)" in r.json["error"]["message"]
    # An agent cannot make the step pass by writing evidence that looks like it.
    forged = json.dumps({"step": "action:test", "exit_code": 0, "timed_out": False})
    J(loopx("evidence", "add", "--run-id", run, "--kind", "command", "--summary", "test: exit 0", "--data", forged,
            "--json", env=EX))
    r = loopx("todo", "done", "--goal-id", g, "--todo-id", t, "--run-id", run, "--json", env=EX)
    assert r.code == 2 and r.json["error"]["code"] == "step_failed"
    assert J(loopx("todo", "list", "--goal-id", g, "--json"))[0]["status"] == "open"
    out = J(loopx("run", "finish", "--run-id", run, "--json", env=EX))
    assert out["outcome"] == "failed"
    assert out["handoff"] == f"step action:test failed (exit 5): test output line; todo {t} stays open"
    # The next contract hands that on.
    nxt = J(loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json", env=EX))
    assert nxt["interaction_contract"]["agent_channel"]["handoff"] == out["handoff"]


def turn(loopx, g):
    # A turn that ran exits by its outcome (README: 1 when it failed, 3 partial, else 0).
    r = loopx("turn", "--goal-id", g, "--agent", "a1", "--json")
    assert r.code == {"failed": 1, "partial": 3}.get(r.json.get("outcome"), 0), r
    return r.json


def test_the_same_step_failing_in_three_runs_in_a_row_asks_a_user(loopx):
    g = J(loopx("project_prompt", "create", "--title", "Stuck", "--json"))["id"]
    J(loopx("action", "add", "--goal-id", g, "--name", "lint", "--json", "--", PY, "-c", "print('lint ok')"))
    J(loopx("action", "add", "--goal-id", g, "--name", "test", "--json", "--", PY, "-c",
            "import sys; print('E   AssertionError: 2 != 3'); sys.exit(5)"))
    J(loopx("todo", "add", "--goal-id", g, "--text", "work", "--json"))
    outcomes = [turn(loopx, g)["outcome"] for _ in range(3)]
    assert outcomes == ["failed", "failed", "failed"]
    out = J(loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json", env=EX))
    assert (out["decision"], out["reasons"]) == ("ask_user", ["repeated_failure"])
    from tests.test_turn_contract import validate

    validate(out)
    c = out["interaction_contract"]
    f = c["repeated_failure"]
    assert (f["step"], f["runs"], f["exit_code"]) == ("action:test", 3, 5)
    assert "AssertionError: 2 != 3" in f["output_tail"]
    assert c["run_id"] is None and c["cli_channel"]["steps"] == []
    assert f"loopx project-prompt retry --goal-id {g}" in c["user_channel"]["next_user_actions"]
    assert "step action:test failed in each of the last 3 runs" in c["agent_channel"]["primary_action"]
    assert J(loopx("run", "list", "--goal-id", g, "--json"))[0]["id"] == f["run_id"]
    # Only a user lets agents try again.
    r = loopx("project_prompt", "retry", "--goal-id", g, "--json", env=EX)
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"
    J(loopx("project_prompt", "retry", "--goal-id", g, "--json"))
    assert turn(loopx, g)["decision"] == "run"


def test_different_failing_steps_are_not_stuck_and_the_threshold_is_per_goal(loopx, tmp_path):
    from pathlib import Path

    g = J(loopx("project_prompt", "create", "--title", "Wobbly", "--json"))["id"]
    # Which step fails is read from a file in the goal's workspace: the steps run there, in a world
    # that shows them nothing else of the test's directories (loopx/domain/workspace.py, loopx/sandbox/world.py).
    flag = Path(J(loopx("workspace", "show", "--goal-id", g, "--json"))["workspace"]) / "which"
    for name in ("a", "b"):
        J(loopx("action", "add", "--goal-id", g, "--name", name, "--json", "--", PY, "-c",
                f"import sys; sys.exit(3 if open({str(flag)!r}).read() == '{name}' else 0)"))
    J(loopx("todo", "add", "--goal-id", g, "--text", "work", "--json"))
    for which in ("a", "b", "a"):
        if flag.parent.is_dir():  # made by the goal's first turn (from the project: the test's cwd)
            flag.write_text(which)
        else:
            Path("which").write_text(which)
        assert turn(loopx, g)["outcome"] == "failed"
    assert J(loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--dry-run", "--json"))["decision"] == "run"
    J(loopx("quota", "set", "--goal-id", g, "--stuck-after", "1", "--json"))
    out = J(loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--dry-run", "--json"))
    assert out["reasons"] == ["repeated_failure"] and out["interaction_contract"]["repeated_failure"]["step"] == "action:a"
    J(loopx("quota", "set", "--goal-id", g, "--stuck-after", "0", "--json"))
    assert J(loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--dry-run", "--json"))["decision"] == "run"
    r = loopx("quota", "set", "--goal-id", g, "--stuck-after", "-1", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"

"""The seed's "Complete Workflow Example", steps 2-8, with real processes; checks the final summary_all.

Step 5's domain commands (``run-model``, ``generate-report``) are goal actions run through
``loopx exec``. Where the seed's shell loop (``for cmd in $(...)``) would split each command at
its spaces, this test runs every listed command whole, through ``bash -c`` (the ``eval``), as the
agent: ``LOOPX_ACTOR=executor``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import loopx_env

FIT = "import sys; print('revenue-forecast fitted: MAPE 3.1%')"
REPORT = "print('report.pdf generated')"


def ok(result):
    assert result.code == 0, result
    return result.json


def run_listed_actions(url, contract, *, skip_finish=True):
    """Step 5: execute every ``next_cli_actions`` entry as the agent, in order."""
    executed = []
    for cmd in contract["cli_channel"]["next_cli_actions"]:
        if skip_finish and " run finish " in f" {cmd} ":
            continue  # the agent finishes with its own numbers and hand-off below
        p = subprocess.run(["bash", "-c", cmd], env=loopx_env(url, LOOPX_ACTOR="executor"),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
        executed.append(cmd)
    return executed


@pytest.mark.slow
def test_seed_workflow_steps_2_to_8(loopx_proc):
    url = loopx_proc.url
    # 2. Create a durable goal.
    ok(loopx_proc("project_prompt", "create", "--title", "Investigate Quarterly Revenue Spike",
                  "--description", "Analyze data, run models, and produce a report.",
                  "--criterion", "A forecast explains the spike", "--criterion", "A report is published", "--json"))
    # 3. Capture the goal id.
    goal = ok(loopx_proc("project_prompt", "list", "--json"))[0]["id"]
    # The operator's set-up: the domain commands as allowed actions, a budget, a plan, and a
    # production gate in front of publishing.
    ok(loopx_proc("action", "add", "--goal-id", goal, "--name", "run-model", "--json", "--",
                  sys.executable, "-c", FIT))
    ok(loopx_proc("action", "add", "--goal-id", goal, "--name", "generate-report", "--json", "--",
                  sys.executable, "-c", REPORT))
    ok(loopx_proc("quota", "set", "--goal-id", goal, "--max-turns", "5", "--max-tokens", "100000", "--json"))
    fit = ok(loopx_proc("todo", "add", "--goal-id", goal, "--text", "Fit the revenue forecast", "--priority", "P1",
                        "--json"))["id"]
    report = ok(loopx_proc("todo", "add", "--goal-id", goal, "--text", "Generate the report",
                           "--depends-on", fit, "--json"))["id"]
    gate = ok(loopx_proc("gate", "add", "--goal-id", goal, "--title", "Publish the report", "--scope",
                         "production", "--blocks", f"todo:{report}", "--json"))
    # 4. Inspect the initial state.
    status = loopx_proc("status", "--goal-id", goal)
    assert status.code == 0 and "Investigate Quarterly Revenue Spike" in status.out, status

    # 5. First turn: the contract names the top ready todo; the gated report stays out.
    doc = ok(loopx_proc("--format", "json", "quota", "should-run", "--goal-id", goal, "--agent", "codex"))
    assert doc["decision"] == "run", doc
    contract = doc["interaction_contract"]
    assert [t["id"] for t in contract["agent_channel"]["ready_todos"]] == [fit]
    executed = run_listed_actions(url, contract)
    assert any(f"--todo-id {fit}" in c and " claim " in c for c in executed)
    assert any("--action run-model" in c for c in executed)
    # 6. Record the execution and the human feedback.
    run1 = contract["run_id"]
    ok(loopx_proc("run", "finish", "--run-id", run1, "--outcome", "ok", "--tokens", "1200", "--cost", "0.4",
                  "--handoff", "next: generate the report once publishing is approved", "--json",
                  env={"LOOPX_ACTOR": "executor"}))
    assert loopx_proc("summary_all", "--goal-id", goal).code == 0
    ok(loopx_proc("reward", "add", "--goal-id", goal, "--run-id", run1, "--score", "1.0",
                  "--comment", "Forecast accuracy validated against actuals.", "--json"))

    # 7. Iterate: the report waits for the gate; the user approves; the next turn does it.
    waiting = ok(loopx_proc("quota", "should-run", "--goal-id", goal, "--agent", "codex", "--json"))
    assert waiting["decision"] == "ask_user", waiting
    ok(loopx_proc("gate", "approve", "--goal-id", goal, "--gate-id", gate["id"], "--comment", "go ahead", "--json"))
    doc = ok(loopx_proc("quota", "should-run", "--goal-id", goal, "--agent", "codex", "--json"))
    assert doc["decision"] == "run", doc
    contract = doc["interaction_contract"]
    assert [t["id"] for t in contract["agent_channel"]["ready_todos"]] == [report]
    assert contract["agent_channel"]["handoff"].startswith("next: generate the report")
    assert contract["agent_channel"]["feedback"][0]["comment"] == "Forecast accuracy validated against actuals."
    executed = run_listed_actions(url, contract)
    assert any("--action generate-report" in c for c in executed)
    run2 = contract["run_id"]
    ok(loopx_proc("run", "finish", "--run-id", run2, "--outcome", "ok", "--tokens", "800", "--cost", "0.1",
                  "--handoff", "report generated; ready to close", "--json", env={"LOOPX_ACTOR": "executor"}))
    ok(loopx_proc("reward", "add", "--goal-id", goal, "--run-id", run2, "--score", "0.5",
                  "--comment", "Good report; shorten the summary next time.", "--json"))
    assert ok(loopx_proc("handoff", "show", "--goal-id", goal, "--json"))["handoff"]["run_id"] == run2

    # 8. Close the goal when complete.
    ok(loopx_proc("project_prompt", "close", "--goal-id", goal, "--json"))
    assert ok(loopx_proc("quota", "should-run", "--goal-id", goal, "--json"))["decision"] == "stop"

    s = ok(loopx_proc("summary_all", "--goal-id", goal, "--json"))
    assert s["totals"]["goals"] == 1
    g = s["goals"][0]
    assert g["goal"]["status"] == "closed"
    assert g["runs"]["total"] == 2 and g["runs"]["by_outcome"] == {"ok": 2, "partial": 0, "failed": 0, "interrupted": 0, "abandoned": 0}
    assert g["runs"]["by_status"]["finished"] == 2
    kinds = g["evidence"]["by_kind"]
    assert sum(kinds.values()) == g["evidence"]["total"] >= 3
    assert g["rewards"]["count"] == 2 and g["rewards"]["mean"] == 0.75
    assert [f["comment"] for f in g["rewards"]["latest"]] == [
        "Good report; shorten the summary next time.", "Forecast accuracy validated against actuals."]
    assert g["quota"]["used"]["turns"] == 2 and g["quota"]["used"]["tokens"] == 2000
    assert g["quota"]["used"]["cost"] == 0.5
    assert g["quota"]["remaining"]["turns"] == 3 and g["quota"]["remaining"]["tokens"] == 98000
    assert g["gates"] == {"pending": [], "rejected": []}
    assert g["todos"]["by_status"] == {"open": 0, "done": 2, "blocked": 0}
    assert g["handoff"]["note"] == "report generated; ready to close" and g["handoff"]["run_id"] == run2
    text = loopx_proc("summary_all", "--goal-id", goal)
    assert "report generated; ready to close" in text.out and "mean +0.75" in text.out

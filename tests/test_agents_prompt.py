"""``loopx agent-prompt``: the turn's prompt, built from the contract."""

from __future__ import annotations

import re

from tests.factories import make_goal


def _goal(loopx, *todo_texts):
    return make_goal(loopx, title="Ship it", description="Make the report.", criteria=("report exists",),
                     acts={"test": ["python3", "-c", "pass"]}, todo_texts=todo_texts, todo_priority="P1")["goal"]


def test_the_prompt_holds_the_objective_the_todo_and_exactly_the_contracts_commands(loopx):
    g = _goal(loopx, "Fit the forecast")
    out = loopx("agent-prompt", "--goal-id", g, "--host", "codex", "--json").json
    prompt = out["prompt"]
    for fact in ("Ship it", "Make the report.", "- [ ] report exists", "Fit the forecast", "your shell tool",
                 "loopx evidence add", "User-only commands"):
        assert fact in prompt, fact
    contract = loopx("run", "show", "--run-id", out["run_id"], "--json").json
    block = re.search(r"```sh\n(.*?)\n```", prompt, re.S).group(1).splitlines()
    listed = [a for a in loopx("quota", "should-run", "--goal-id", g, "--json").json
              ["interaction_contract"]["cli_channel"]["next_cli_actions"]]
    assert block == listed and block[-1].startswith("loopx run finish")  # by hand: the host finishes
    managed = loopx("agent-prompt", "--goal-id", g, "--host", "claude-code", "--managed", "--json").json
    assert managed["run_id"] == out["run_id"] and "your Bash tool" in managed["prompt"]
    assert "loopx run finish" not in re.search(r"```sh\n(.*?)\n```", managed["prompt"], re.S).group(1)
    assert contract["id"] == out["run_id"]


def test_the_prompt_names_every_command_the_broker_refuses_as_a_users(loopx):
    g = _goal(loopx, "Fit the forecast")
    prompt = loopx("agent-prompt", "--goal-id", g, "--host", "codex", "--json").json["prompt"]
    listed = re.search(r"User-only commands \((.*?)\) refuse you", prompt).group(1).split(", ")
    for command in ("project-prompt close", "project-prompt retry", "gate approve", "quota set", "config set"):
        assert command in listed, listed


def test_no_turn_no_commands_and_a_bad_host_is_refused(loopx):
    g = _goal(loopx)
    loopx("project_prompt", "pause", "--goal-id", g)
    out = loopx("agent-prompt", "--goal-id", g, "--json").json
    assert out["decision"] == "wait" and out["run_id"] is None and "```sh" not in out["prompt"]
    bad = loopx("agent-prompt", "--goal-id", g, "--host", "gpt", "--json")
    assert bad.code == 2 and bad.json["error"]["code"] == "invalid_argument"

"""Authority without loopholes, through real ``loopx`` processes.

An empty or unknown ``LOOPX_ACTOR`` is an error; a command started inside a governed step acts as
the executor whatever ``LOOPX_ACTOR`` says; a run belongs to the agent that opened it; a dry run
shows no run id a real call would not use.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.cli_helpers import loopx_in_process
from tests.conftest import loopx_env
from tests.factories import make_goal

pytestmark = pytest.mark.slow  # real confined turns, seconds each: not in the quick tier

PY = sys.executable


def J(r):
    assert r.code == 0, r
    return r.json


@pytest.fixture
def shim_env(registry_url, tmp_path):
    """Environment whose PATH has a ``loopx`` running this checkout (as an installed LoopX would)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "loopx").write_text(f"#!/bin/sh\nexec {PY} -m loopx \"$@\"\n")
    (bin_dir / "loopx").chmod(0o755)
    return {"PATH": str(bin_dir) + os.pathsep + loopx_env(registry_url)["PATH"]}


def in_process(loopx_proc):
    """The same commands as ``loopx_proc``, in this process (tests/cli_helpers.py): for the set-up a
    test stands on and the reads that check what it left. What a test is about - a real process's
    actor, a step's broker, a refusal - stays a real process."""
    return lambda *args, env=None: loopx_in_process(*args, env=loopx_env(loopx_proc.url, **(env or {})))


def goal_with_run(loopx_proc, agent="a1", acts=None):
    call = in_process(loopx_proc)
    made = make_goal(call, title="Authority", acts=acts or {"hello": [PY, "-c", "print('hi')"]},
                     todo_texts=("work",))
    g, [t] = made["goal"], made["todos"]
    doc = J(call("quota", "should-run", "--goal-id", g, "--agent", agent, "--json",
                 env={"LOOPX_ACTOR": "executor"}))
    assert doc["decision"] == "run", doc
    return g, t, doc["interaction_contract"]


@pytest.mark.parametrize("value", ["", "root", "core", "User"])
def test_an_empty_or_unknown_actor_is_refused_and_writes_nothing(loopx_proc, value):
    r = loopx_proc("project_prompt", "create", "--title", "t", "--json", env={"LOOPX_ACTOR": value})
    assert r.code == 2 and r.json["error"]["code"] == "invalid_actor", r
    r = loopx_proc("project_prompt", "create", "--title", "t", env={"LOOPX_ACTOR": value})
    assert r.code == 2 and r.err.strip().endswith("[invalid_actor]") and len(r.err.strip().splitlines()) == 1
    assert J(loopx_proc("project_prompt", "list", "--json")) == []


def test_a_governed_step_cannot_approve_a_gate_by_claiming_to_be_the_user(loopx_proc, shim_env):
    call = in_process(loopx_proc)
    g = J(call("project_prompt", "create", "--title", "Sneaky", "--json"))["id"]
    J(call("action", "add", "--goal-id", g, "--name", "deploy", "--json", "--", "true"))
    gate = J(call("gate", "add", "--goal-id", g, "--title", "Deploy", "--blocks", "action:deploy",
                  "--scope", "production", "--json"))
    J(call("action", "add", "--goal-id", g, "--name", "sneak", "--json", "--", "sh", "-c",
           f"LOOPX_ACTOR=user loopx gate approve --goal-id {g} --gate-id {gate['id']} --comment ok"))
    J(call("todo", "add", "--goal-id", g, "--text", "work", "--json"))
    run = J(call("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json",
                 env={"LOOPX_ACTOR": "executor"}))["interaction_contract"]["run_id"]
    r = loopx_proc("exec", "--run-id", run, "--agent", "a1", "--action", "sneak", "--json",
                   env={"LOOPX_ACTOR": "executor", **shim_env})
    assert r.code == 1, r
    # The step's loopx reached the turn's broker, which refused the user's verb and recorded the attempt.
    assert "[actor_forbidden]" in r.json["data"]["output_tail"] and f"inside run {run}" in r.json["data"]["output_tail"]
    refused = [e for e in J(call("evidence", "list", "--run-id", run, "--json")) if e["kind"] == "refused"]
    assert len(refused) == 1 and "gate approve" in refused[0]["summary"]
    [listed] = J(call("gate", "list", "--goal-id", g, "--json"))
    assert listed["status"] == "pending"
    assert not any(e["kind"] == "gate.approved" for e in J(call("history", "--goal-id", g, "--json")))


@pytest.mark.parametrize("command", [
    ["reward", "add", "--score", "1"],
    ["quota", "grant", "--turns", "5"],
    ["project_prompt", "close"],
])
def test_user_only_commands_refuse_any_process_inside_a_run(loopx_proc, command):
    g, _t, c = goal_with_run(loopx_proc)
    args = [*command[:2], "--goal-id", g, *command[2:]]
    if command[0] == "reward":
        args += ["--run-id", c["run_id"]]
    r = loopx_proc(*args, "--json", env={"LOOPX_RUN_ID": c["run_id"]})
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden", r
    # Claiming to be the user is refused outright: user never comes from the environment.
    r = loopx_proc(*args, "--json", env={"LOOPX_ACTOR": "user", "LOOPX_RUN_ID": c["run_id"]})
    assert r.code == 2 and r.json["error"]["code"] == "invalid_actor", r
    # The same command from a user's own shell works: the refusal is about where it runs.
    assert loopx_proc(*args, "--json").code == 0


def test_a_run_belongs_to_the_agent_that_opened_it(loopx_proc):
    g, t, c = goal_with_run(loopx_proc, agent="a1")
    run = c["run_id"]
    ex = {"LOOPX_ACTOR": "executor"}
    # Every line of the contract says whose run it is.
    assert all(s["argv"][s["argv"].index("--agent") + 1] == "a1" for s in c["cli_channel"]["steps"])
    tries = [
        (["exec", "--run-id", run, "--agent", "a2", "--action", "hello"], {}),
        (["exec", "--run-id", run, "--action", "hello"], {"LOOPX_AGENT": "a2"}),
        (["evidence", "add", "--run-id", run, "--agent", "a2", "--kind", "note", "--summary", "mine now"], {}),
        (["todo", "claim", "--goal-id", g, "--todo-id", t, "--run-id", run, "--agent", "a2"], {}),
        (["todo", "done", "--goal-id", g, "--todo-id", t, "--run-id", run], {"LOOPX_AGENT": "a2"}),
        (["run", "finish", "--run-id", run, "--agent", "a2"], {}),
        (["run", "finish", "--run-id", run], {"LOOPX_AGENT": "a2"}),
    ]
    for args, env in tries:
        r = loopx_proc(*args, "--json", env={**ex, **env})
        assert r.code == 2 and r.json["error"]["code"] == "run_not_yours", (args, r)
    shown = J(in_process(loopx_proc)("run", "show", "--run-id", run, "--json"))
    assert shown["status"] == "open" and shown["evidence"] == []
    # The owner may.
    assert loopx_proc("exec", "--run-id", run, "--agent", "a1", "--action", "hello", "--json", env=ex).code == 0


def test_a_step_of_one_run_cannot_act_on_another_run(loopx_proc):
    _g1, _t1, c1 = goal_with_run(loopx_proc, agent="a1")
    _g2, _t2, c2 = goal_with_run(loopx_proc, agent="a1")
    inside = {"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": c1["run_id"], "LOOPX_AGENT": "a1"}
    for args in (["run", "finish", "--run-id", c2["run_id"]],
                 ["exec", "--run-id", c2["run_id"], "--action", "hello"],
                 ["evidence", "add", "--run-id", c2["run_id"], "--kind", "note", "--summary", "x"]):
        r = loopx_proc(*args, "--json", env=inside)
        assert r.code == 2 and r.json["error"]["code"] == "run_not_yours", (args, r)
    assert J(in_process(loopx_proc)("run", "show", "--run-id", c2["run_id"], "--json"))["status"] == "open"


def test_dry_run_says_it_is_a_preview_and_shows_no_run_id_a_real_call_would_not_use(loopx_proc):
    call = in_process(loopx_proc)
    g = make_goal(call, title="Preview", todo_texts=("work",))["goal"]
    dry = J(loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--dry-run", "--json"))
    assert dry["dry_run"] is True and "nothing was written" in dry["preview"] and dry["decision"] == "run"
    c = dry["interaction_contract"]
    # No run is opened and the contract names none; its steps are listed (issue 26: a preview
    # must show what a real call gives) with the run id the preview drew, which it says.
    assert c["run_id"] is None and c["contract_id"] is None
    finish = c["cli_channel"]["steps"][-1]["argv"]
    drawn = finish[finish.index("--run-id") + 1]
    assert [s["kind"] for s in c["cli_channel"]["steps"]][-1] == "finish" and drawn in dry["preview"]
    text = loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--dry-run")
    assert "[dry run: preview]" in text.out and "no run was opened" in text.out
    assert J(call("run", "list", "--goal-id", g, "--json")) == []
    real = J(loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json"))["interaction_contract"]
    # With a run open, a preview shows that run: the real call hands the same one back.
    again = J(loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--dry-run", "--json"))
    assert again["interaction_contract"]["run_id"] == real["run_id"]
    assert J(loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json"))[
        "interaction_contract"]["run_id"] == real["run_id"]

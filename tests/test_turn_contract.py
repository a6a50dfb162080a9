"""The contract document: it validates against the shipped JSON Schema for every decision, stays
small, and every agent action is a complete loopx command that works when pasted, in order."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from loopx import hookimpl
from loopx.domain import runs
from loopx.domain import goals as project_prompt
from loopx.views.should_run import should_run
from tests.conftest import ROOT, loopx_env
from tests.test_turn_helpers import PY, add_gate, ask, make_goal, plugin

pytestmark = pytest.mark.slow  # real turns, seconds each: not in the quick tier

SCHEMA = json.loads((ROOT / "loopx" / "schemas" / "contract.json").read_text())


def validate(out: dict) -> None:
    jsonschema.validate(out, SCHEMA, cls=jsonschema.Draft202012Validator)


class Contributes:
    """A capability that adds an action and a note to run contracts, and vetoes one goal."""

    def __init__(self, veto_goal=None):
        self.veto_goal = veto_goal

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [{"command": f"loopx evidence add --run-id {run_id} --kind check --summary 'capability check'",
                 "note": "record the capability check"}]

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        if goal.id == self.veto_goal:
            return {"reason": "needs_repair", "message": "repair first", "actions": ["loopx history --goal-id " + goal.id]}
        return None


def test_the_schema_is_valid_and_printed_by_loopx_schema(loopx):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert loopx("schema", "contract").code == 0
    assert json.loads(loopx("schema", "contract").out) == SCHEMA
    assert loopx("schema", "contract", "--json").json == SCHEMA
    assert "contract" in loopx("schema", "--json").json
    assert loopx("--json", "schema", "nope").json["error"]["code"] == "not_found"


def test_contracts_of_every_decision_validate_and_stay_small(reg):
    outs = {}
    typical = make_goal(reg, limits={"max_turns": 20, "max_tokens": 2_000_000, "max_cost": 15,
                                     "max_wall_seconds": 7200},
                        todo_texts=("Load the data", "Fit the forecast", "Write the report"),
                        acts={"test": ["pytest", "-q"], "lint": ["ruff", "check", "."]})["goal"]
    outs["run"] = ask(reg, typical)
    outs["wait"] = ask(reg, typical, agent="other")
    outs["planning"] = ask(reg, make_goal(reg, todo_texts=())["goal"])
    gated = make_goal(reg)["goal"]
    add_gate(reg, gated)
    outs["ask_user"] = ask(reg, gated)
    closed = make_goal(reg)["goal"]
    project_prompt.transition(reg, "user", "close", closed)
    outs["stop"] = ask(reg, closed)
    vetoed = make_goal(reg)["goal"]
    with plugin(Contributes(veto_goal=vetoed), "test-contributes"):
        outs["repair"] = ask(reg, vetoed)
        outs["contributed"] = ask(reg, make_goal(reg)["goal"])
    outs["dry"] = ask(reg, make_goal(reg)["goal"], dry_run=True)
    for name, out in outs.items():
        validate(out)
        size = len(json.dumps(out["interaction_contract"]).encode())
        assert size < 3072, (name, size)
    assert outs["repair"]["decision"] == "repair"
    contributed = outs["contributed"]["interaction_contract"]
    assert any("capability check" in a for a in contributed["cli_channel"]["next_cli_actions"])
    assert "plugin: record the capability check" in contributed["agent_channel"]["notes"]


def test_a_capability_action_listed_in_the_contract_may_be_executed_verbatim(reg):
    from loopx.domain import actions

    g = make_goal(reg)["goal"]
    with plugin(Contributes(), "test-contributes"):
        c = ask(reg, g)["interaction_contract"]
        step = next(s for s in c["cli_channel"]["steps"] if "capability check" in s["argv"])
        assert step["kind"] == "do" and step["argv"][:2] == ["loopx", "exec"]
        argv = step["argv"][step["argv"].index("--") + 1:]
        with reg.read() as tx:
            run, name, command, step_id = actions.authorize(tx, c["run_id"], argv=argv)
    assert name is None and command == argv and step_id == step["id"]


def test_long_texts_are_cut_to_keep_the_contract_small(reg):
    g = make_goal(reg, todo_texts=["x" * 4000 for _ in range(8)])["goal"]
    r = ask(reg, g)["interaction_contract"]["run_id"]
    runs.finish(reg, "user", run_id=r, outcome="ok", handoff="h" * 8000)
    out = ask(reg, g)
    validate(out)
    c = out["interaction_contract"]
    assert len(c["agent_channel"]["ready_todos"]) == 5
    assert len(json.dumps(c).encode()) < 4096


def test_agent_actions_work_when_pasted_in_order(registry_url, tmp_path):
    """Every next_cli_actions entry, run by a shell exactly as printed, succeeds, in order."""
    from loopx.ledger.registry import Registry

    with Registry.open(registry_url) as reg:
        g = make_goal(reg, acts={"hello": [PY, "-c", "print('hello')"]})["goal"]
        out = should_run(reg, "user", goal_id=g, agent="paster")
    actions_ = out["interaction_contract"]["cli_channel"]["next_cli_actions"]
    verbs = [shlex.split(a)[1:3] for a in actions_]
    assert verbs == [["todo", "claim"], ["exec", "--run-id"], ["todo", "done"], ["run", "finish"]]
    steps_ = out["interaction_contract"]["cli_channel"]["steps"]
    assert [s["kind"] for s in steps_] == ["claim", "do", "record", "finish"]
    assert [shlex.join(s["argv"]) for s in steps_] == actions_
    assert all("--agent" in s["argv"] and "paster" in s["argv"] for s in steps_)
    assert "what was done" not in json.dumps(out)
    env = loopx_env(registry_url, LOOPX_ACTOR="executor")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "loopx").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m loopx \"$@\"\n")
    (shim / "loopx").chmod(0o755)
    env["PATH"] = str(shim) + os.pathsep + env["PATH"]
    for line in actions_:
        p = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (line, p.stdout, p.stderr)
    with Registry.open(registry_url) as reg:
        shown = runs.show(reg, out["interaction_contract"]["run_id"])
    assert shown["status"] == "finished" and shown["outcome"] == "ok"
    assert [e["kind"] for e in shown["evidence"]] == ["step_started", "command"]  # the step's claim, then its result


@pytest.mark.parametrize("where", ["root", "after", "json_flag"])
def test_format_json_before_or_after_the_subcommand(loopx, where):
    g = loopx("project_prompt", "create", "--title", "Fmt", "--json").json["id"]
    args = {"root": ["--format", "json", "quota", "should-run", "--goal-id", g],
            "after": ["quota", "should-run", "--goal-id", g, "--format", "json"],
            "json_flag": ["quota", "should-run", "--goal-id", g, "--json"]}[where]
    out = loopx(*args).json
    assert set(out) == {"goal_id", "should_run", "decision", "reasons", "interaction_contract"}
    validate(out)


def test_text_output_shows_the_decision_and_the_actions(loopx):
    g = loopx("project_prompt", "create", "--title", "Txt", "--json").json["id"]
    loopx("todo", "add", "--goal-id", g, "--text", "step")
    text = loopx("quota", "should-run", "--goal-id", g).out
    assert "decision: run  (ready_work)" in text and "loopx todo claim" in text

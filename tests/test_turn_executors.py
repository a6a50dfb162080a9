"""Executor providers (``loopx_register_executors``), ``loopx turn`` and ``loopx loop``."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopx.turn import executors, governed as turns
from loopx import hookimpl
from loopx.domain import runs
from loopx.values.errors import LoopxError
from tests.test_turn_helpers import PY, ask, make_goal, plugin


class Scripted:
    """A provider that records a note through the API and reports fixed usage."""

    def __init__(self, outcome="ok", crash=False):
        self.outcome, self.crash, self.seen = outcome, crash, []

    def run_turn(self, registry, contract, *, agent):
        from loopx.domain import evidence

        self.seen.append((contract["interaction_contract"]["run_id"], agent))
        if self.crash:
            raise RuntimeError("model API down")
        evidence.record(registry, "executor", run_id=contract["interaction_contract"]["run_id"], kind="note",
                        summary="scripted turn")
        return {"outcome": self.outcome, "tokens": 321, "cost": 0.01, "handoff": "scripted: next step"}


class Provides:
    def __init__(self, name, provider):
        self.name, self.provider = name, provider

    @hookimpl
    def loopx_register_executors(self, register):
        register(self.name, self.provider)


def test_the_builtin_shell_executor_is_registered():
    from loopx.turn.executors.shell import ShellExecutor

    assert isinstance(executors.providers()["shell"], ShellExecutor)
    with pytest.raises(LoopxError) as err:
        executors.get("nope")
    assert err.value.code == "not_found" and "shell" in err.value.message


def test_a_plugin_provider_carries_out_a_turn_and_the_core_finishes_it(reg):
    g = make_goal(reg, limits={"max_turns": 3})["goal"]
    provider = Scripted()
    with plugin(Provides("scripted", provider), "test-scripted"):
        t = turns.turn(reg, "user", goal_id=g, executor="scripted", agent="bot")
    assert t["decision"] == "run" and t["outcome"] == "ok" and provider.seen == [(t["run_id"], "bot")]
    with reg.read() as tx:
        run = runs.load_run(tx, t["run_id"])
    assert (run.status, run.tokens, run.cost, run.handoff) == ("finished", 321, 0.01, "scripted: next step")
    # The core recorded which process owns the run (loopx.domain.claims); the provider its note.
    assert [e["kind"] for e in t["evidence"]] == ["run_owner", "note"]


def test_a_crashing_provider_still_gets_its_run_finished(reg):
    g = make_goal(reg)["goal"]
    with plugin(Provides("crashy", Scripted(crash=True)), "test-crashy"), pytest.raises(RuntimeError):
        turns.turn(reg, "user", goal_id=g, executor="crashy", agent="bot")
    with reg.read() as tx:
        (row,) = tx.query("SELECT status, outcome, handoff FROM runs WHERE goal_id = ?", (g,))
    assert (row["status"], row["outcome"]) == ("finished", "failed") and "model API down" in row["handoff"]


def test_two_providers_of_one_name_are_a_plugin_error_but_a_plugin_may_replace_a_builtin():
    with plugin(Provides("dup", Scripted()), "test-dup-1"), plugin(Provides("dup", Scripted()), "test-dup-2"):
        with pytest.raises(LoopxError) as err:
            executors.providers()
        assert err.value.code == "plugin_error"
    mine = Scripted()
    with plugin(Provides("shell", mine), "test-shell-override"):
        assert executors.get("shell") is mine


def test_loop_with_the_shell_executor_runs_the_plan_and_stops_when_nothing_is_ready(loopx, tmp_path, monkeypatch):
    # The goal's project is where it was created; its confined steps run and write only in the
    # goal's workspace (loopx/domain/workspace.py), made from it.
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    g = loopx("project_prompt", "create", "--title", "Loop", "--json").json["id"]
    log = Path(loopx("workspace", "show", g, "--json").json["workspace"]) / "log.txt"
    loopx("action", "add", "--goal-id", g, "--name", "append", "--", PY, "-c",
          "open('log.txt', 'a').write('turn\\n')")
    first = loopx("todo", "add", "--goal-id", g, "--text", "one", "--json").json["id"]
    loopx("todo", "add", "--goal-id", g, "--text", "two", "--depends-on", first)
    out = loopx("loop", "--goal-id", g, "--executor", "shell", "--max-turns", "5", "--json")
    assert out.code == 0, out
    res = out.json
    assert [t["outcome"] for t in res["turns"]] == ["ok", "ok"]
    assert (res["stopped"], res["decision"], res["reasons"]) == ("decision", "ask_user", ["no_ready_work"])
    assert log.read_text() == "turn\nturn\n"
    todos = loopx("todo", "list", "--goal-id", g, "--json").json
    assert {t["status"] for t in todos} == {"done"}
    # Every exec ran as the executor and was recorded under its run.
    ev = loopx("evidence", "list", "--goal-id", g, "--kind", "command", "--json").json
    # The core writes a step's evidence (no agent can forge it) and names who ran it.
    assert len(ev) == 2 and {e["actor"] for e in ev} == {"core"} and {e["data"]["by"] for e in ev} == {"executor"}
    assert {e["run_id"] for e in ev} == {t["run_id"] for t in res["turns"]}


def test_turn_stops_at_a_failing_action_and_leaves_the_todo_open(loopx):
    g = loopx("project_prompt", "create", "--title", "Fails", "--json").json["id"]
    loopx("action", "add", "--goal-id", g, "--name", "boom", "--", PY, "-c", "raise SystemExit(4)")
    loopx("todo", "add", "--goal-id", g, "--text", "one")
    r = loopx("turn", "--goal-id", g, "--json")
    t = r.json
    assert t["outcome"] == "failed" and "step action:boom failed (exit 4)" in t["handoff"]
    assert r.code == 1  # a failed turn is a failing command
    assert loopx("todo", "list", "--goal-id", g, "--json").json[0]["status"] == "open"
    text = loopx("turn", "--goal-id", g, "--max-turns", "1")
    assert text.code == 2  # turn has no --max-turns: a usage error, not a crash


def test_loop_honours_max_turns_and_turn_reports_non_run_decisions(loopx):
    g = loopx("project_prompt", "create", "--title", "Many", "--json").json["id"]
    for i in range(3):
        loopx("todo", "add", "--goal-id", g, "--text", f"step {i}")
    res = loopx("loop", "--goal-id", g, "--max-turns", "2", "--json").json
    assert res["stopped"] == "max_turns" and len(res["turns"]) == 2
    loopx("gate", "add", "--goal-id", g, "--title", "Stop here")
    t = loopx("turn", "--goal-id", g, "--json").json
    assert (t["decision"], t["run_id"]) == ("ask_user", None)
    assert "decision: ask_user" in loopx("turn", "--goal-id", g).out


def test_planning_turn_through_shell_is_partial_and_hands_off(reg):
    g = make_goal(reg, todo_texts=())["goal"]
    t = turns.turn(reg, "user", goal_id=g, executor="shell", agent="bot")
    assert t["reasons"] == ["no_todos"] and t["outcome"] == "partial" and "no todos" in t["handoff"]
    assert ask(reg, g, agent="bot")["interaction_contract"]["agent_channel"]["handoff"] == t["handoff"]


def test_every_builtin_executor_implements_the_executor_protocol_and_a_provider_without_run_turn_is_refused():
    from loopx import api

    found = executors.providers()
    assert {"shell", "claude-code", "codex", "command"} <= set(found)
    assert all(isinstance(found[n], api.executors.Executor) for n in ("shell", "claude-code", "codex", "command"))
    # Those that can tell before a run is opened that they cannot work say so through check().
    assert all(isinstance(found[n], api.executors.CheckedExecutor) for n in ("claude-code", "codex", "command"))
    assert not isinstance(found["shell"], api.executors.CheckedExecutor)

    class NoTurn:
        def check(self):
            pass

    with plugin(Provides("no-turn", NoTurn()), "test-no-turn"):
        assert "no-turn" not in executors.providers()

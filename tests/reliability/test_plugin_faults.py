"""Plugin faults are contained (real CLI processes; tests/plugins/loopx_faulty installed through a
real entry point). A hook that raises, runs past its deadline or returns the wrong type is named
in a warning and skipped, except a veto, which fails closed; contract hooks run before the write
transaction, so a slow one never holds other writers up; a broken commands hook costs its plugin
its commands and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from loopx.testing import wait_until
from tests.plugin_site import new_goal as goal, plugin_env, should_run


@pytest.fixture
def faulty(tmp_path, sqlite_url):
    from loopx.ledger.registry import Registry

    Registry.open(sqlite_url).close()  # read commands refuse a registry that does not exist
    env = plugin_env(tmp_path, sqlite_url, faulty="loopx_faulty")

    def run(*args, **extra):
        p = subprocess.run([sys.executable, "-m", "loopx", *args], env={**env, **extra}, capture_output=True,
                           text=True, timeout=60)
        assert "Traceback" not in p.stderr, p.stderr
        return p

    run.env, run.url = env, sqlite_url
    return run


def test_a_healthy_plugin_contributes(faulty):
    doc, err = should_run(faulty, goal(faulty))
    assert doc["decision"] == "run" and err == ""
    # A contributed action is a do step: `loopx exec --run-id R --agent A -- loopx faulty-hello`.
    assert any(line.endswith(" -- loopx faulty-hello")
               for line in doc["interaction_contract"]["cli_channel"]["next_cli_actions"])


@pytest.mark.parametrize("mode, says", [("raise", "the veto exploded"), ("wrongtype", "returned the wrong type"),
                                        ("sleep:60", "timed out")])
@pytest.mark.slow
def test_a_failing_veto_fails_closed_naming_the_plugin(faulty, mode, says):
    g = goal(faulty)
    started = time.monotonic()
    doc, err = should_run(faulty, g, FAULTY_VETO=mode, LOOPX_HOOK_TIMEOUT="0.5")
    assert time.monotonic() - started < 30  # the 0.5 s deadline, not the 60 s hook, decides how long it takes
    assert (doc["decision"], doc["reasons"]) == ("repair", ["plugin_failed"])
    assert "'faulty'" in err and "loopx_contract_veto" in err and says in err
    assert "faulty" in doc["interaction_contract"]["agent_channel"]["primary_action"] or \
        "faulty" in json.dumps(doc["interaction_contract"])
    # No run was opened: nothing was charged for a decision that is not run.
    quota = json.loads(faulty("quota", "show", "--goal-id", g, "--json").stdout)
    assert quota["used"]["turns"] == 0 and quota["open_runs"] == []
    # `turn` does not crash either.
    p = faulty("turn", "--goal-id", g, "--json", FAULTY_VETO=mode, LOOPX_HOOK_TIMEOUT="0.5")
    assert p.returncode in (0, 1), p.stderr
    # Once the plugin behaves (or is disabled), the goal runs again.
    assert should_run(faulty, g)[0]["decision"] == "run"
    assert should_run(faulty, g, FAULTY_VETO=mode, LOOPX_DISABLE_PLUGINS="faulty")[0]["decision"] == "run"


@pytest.mark.parametrize("mode, says", [("raise", "the actions exploded"), ("wrongtype", "returned the wrong type"),
                                        ("sleep:60", "timed out"), ("baditem", "42")])
def test_failing_contract_actions_are_named_and_skipped(faulty, mode, says):
    g = goal(faulty)
    started = time.monotonic()
    doc, err = should_run(faulty, g, FAULTY_ACTIONS=mode, LOOPX_HOOK_TIMEOUT="0.5")
    assert time.monotonic() - started < 30  # not the hook's 60 s
    assert doc["decision"] == "run"
    assert "'faulty'" in err and "loopx_contract_actions" in err and says in err and "skipped" in err
    lines = doc["interaction_contract"]["cli_channel"]["next_cli_actions"]
    assert not any("rm -rf" in line for line in lines)
    # good items of a mixed answer stay
    assert any(line.endswith(" -- loopx faulty-hello") for line in lines) == (mode == "baditem")
    assert lines[-1].startswith("loopx run finish")


def test_a_slow_veto_does_not_hold_the_write_lock(faulty, tmp_path):
    g = goal(faulty)
    other = goal(faulty)
    release = tmp_path / "release-veto"
    slow = subprocess.Popen([sys.executable, "-m", "loopx", "quota", "should-run", "--goal-id", g, "--json"],
                            env={**faulty.env, "FAULTY_VETO": f"block:{release}", "LOOPX_HOOK_TIMEOUT": "120"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (tmp_path / "release-veto.in").exists() or slow.poll() is not None,
                   "the slow process to enter its veto hook")
        assert slow.poll() is None
        for target in (g, other):
            # The hook stays until released below: a writer waiting behind it would never finish.
            p = faulty("todo", "add", "--goal-id", target, "--text", "meanwhile", "--json")
            assert p.returncode == 0, p.stderr
        assert slow.poll() is None  # still in the hook: the writes above did not wait for it
    finally:
        release.touch()
        out, err = slow.communicate(timeout=60)
    assert json.loads(out)["decision"] == "run", err


def test_a_broken_commands_hook_costs_only_its_commands(faulty):
    p = faulty("--help", FAULTY_COMMANDS="raise")
    assert p.returncode == 0
    assert "project-prompt" in p.stdout and "quota" in p.stdout
    assert "faulty-hello" not in p.stdout  # added before the hook raised: removed again
    assert "'faulty'" in p.stderr and "loopx_register_commands" in p.stderr and "exploded" in p.stderr
    p = faulty("faulty-hello", FAULTY_COMMANDS="raise")
    assert p.returncode == 2 and "faulty-hello" in p.stderr
    assert faulty("project_prompt", "list", FAULTY_COMMANDS="raise").returncode == 0
    # Healthy, the command is there.
    p = faulty("faulty-hello", "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == {"hello": "world"}
    assert "faulty-hello" in faulty("--help").stdout


def test_a_bad_executor_registration_is_named_and_skipped(loopx_plugin, capsys):
    from loopx.turn import executors
    from loopx import hookimpl

    class Provider:
        def run_turn(self, registry, contract, *, agent):
            return {"outcome": "ok"}

    class Broken:
        @hookimpl
        def loopx_register_executors(self, register):
            register("no-turn", object())

    class Raises:
        @hookimpl
        def loopx_register_executors(self, register):
            register("half", Provider())
            raise RuntimeError("registry exploded")

    loopx_plugin(Broken(), name="broken-exec")
    loopx_plugin(Raises(), name="raising-exec")
    found = executors.providers()
    assert "shell" in found and "no-turn" not in found and "half" not in found
    err = capsys.readouterr().err
    assert "'broken-exec'" in err and "no run_turn" in err
    assert "'raising-exec'" in err and "registry exploded" in err

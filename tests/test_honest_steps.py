"""Steps, not strings: contributed actions are checked as argv when they are contributed, and the
shell executor runs the contract's steps - a plugin's among them - up to the first failure."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap

import pytest

from loopx import hookimpl
from tests.conftest import loopx_env
from tests.test_turn_helpers import ask, make_goal, plugin

pytestmark = pytest.mark.slow  # real confined turns, seconds each: not in the quick tier

PY = sys.executable


class Contributes:
    """A plugin answering ``loopx_contract_actions`` with whatever it is given (and a good action)."""

    def __init__(self, *bad, veto_actions=None):
        self.bad, self.veto_actions = list(bad), veto_actions

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [*self.bad, {"argv": ["loopx", "project_prompt", "show", "--goal-id", goal.id], "action": "look"}]

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        if self.veto_actions is None:
            return None
        return {"reason": "needs_repair", "message": "repair first", "actions": self.veto_actions}


BAD = {
    "shell operator in a string": {"command": "loopx project_prompt show; touch /tmp/loopx-pwned"},
    "shell operator in argv": {"argv": ["loopx", "project_prompt", "show", "&&", "touch", "/tmp/x"]},
    "command substitution": {"argv": ["loopx", "evidence", "add", "--summary", "$(touch /tmp/x)"]},
    "control character": {"argv": ["loopx", "project_prompt", "show", "--goal-id", "g\nrm -rf /"]},
    "a string instead of a list": {"argv": "loopx project_prompt show"},
    "not loopx": {"argv": ["sh", "-c", "touch /tmp/x"]},
    "too long": {"argv": ["loopx", "x", *["y" * 100] * 60]},
    "not a dict": "loopx project_prompt show",
}


@pytest.mark.parametrize("why", sorted(BAD))
def test_a_malformed_contribution_is_dropped_named_and_never_reaches_a_contract(reg, capsys, why):
    g = make_goal(reg)["goal"]
    with plugin(Contributes(BAD[why]), "test-bad-plugin"):
        out = ask(reg, g)
    c = out["interaction_contract"]
    text = json.dumps(c["cli_channel"])
    assert "touch" not in text and "rm -rf" not in text and "yyyy" not in text
    # The good action of the same plugin is kept, as a do step run through loopx exec.
    [look] = [s for s in c["cli_channel"]["steps"] if s["id"] == "test-bad-plugin:look"]
    assert look["kind"] == "do" and look["argv"][look["argv"].index("--") + 1:][:3] == ["loopx", "project_prompt", "show"]
    assert c["cli_channel"]["next_cli_actions"] == [shlex.join(s["argv"]) for s in c["cli_channel"]["steps"]]
    notes = [n for n in c["agent_channel"].get("notes", []) if "test-bad-plugin" in n]
    assert len(notes) == 1 and "dropped" in notes[0]
    err = capsys.readouterr().err
    assert "plugin 'test-bad-plugin'" in err and "dropped" in err


def test_a_veto_whose_actions_are_a_string_is_not_split_into_characters(reg, capsys):
    g = make_goal(reg)["goal"]
    with plugin(Contributes(veto_actions="loopx self-repair fix"), "test-veto-string"):
        out = ask(reg, g)
    # A malformed veto fails closed (repair, plugin_failed), and its string is never eval-ed or split.
    assert (out["decision"], out["reasons"]) == ("repair", ["plugin_failed"])
    assert out["interaction_contract"]["cli_channel"]["next_cli_actions"] == ["loopx plugins"]
    assert "plugin 'test-veto-string'" in capsys.readouterr().err
    with plugin(Contributes(veto_actions=[["loopx", "history", "--goal-id", g], "loopx x; reboot"]), "test-veto-mixed"):
        out = ask(reg, g)
    c = out["interaction_contract"]["cli_channel"]
    assert c["next_cli_actions"] == [f"loopx history --goal-id {g}"]
    assert [s["kind"] for s in c["steps"]] == ["do"]


STAMP = textwrap.dedent('''
    """A third-party plugin for the test: contributes `loopx stamp mark` to run contracts."""
    import os
    import sys

    import click

    from loopx import hookimpl


    @hookimpl
    def loopx_contract_actions(tx, goal, run_id, remaining):
        if not run_id:
            return None
        return [{"argv": ["loopx", "stamp", "mark", "--run-id", run_id], "note": "stamp the run", "action": "mark"}]


    @hookimpl
    def loopx_register_commands(cli):
        @click.group()
        def stamp():
            """Stamps."""

        @stamp.command()
        @click.option("--run-id", required=True)
        def mark(run_id):
            """Write the run id to STAMP_FILE; exit with STAMP_EXIT."""
            with open(os.environ["STAMP_FILE"], "a") as fh:
                fh.write(run_id + "\\n")
            print("stamped", run_id)
            sys.exit(int(os.environ.get("STAMP_EXIT", "0")))

        cli.add_command(stamp)
''')


@pytest.fixture
def stamp_env(registry_url, tmp_path):
    """Environment in which every loopx process loads the ``stamp`` plugin (an installed distribution)."""
    site = tmp_path / "site"
    dist = site / "loopx_stamp_test-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "loopx_stamp_test.py").write_text(STAMP)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: loopx-stamp-test\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[loopx]\nstamp = loopx_stamp_test\n")
    env = loopx_env(registry_url, PYTHONPATH=str(site), LOOPX_PLUGIN_CACHE="0", LOOPX_PLUGINS="stamp",
                    STAMP_FILE=str(tmp_path / "stamps"))
    return env


def run(env, *args, **extra):
    p = subprocess.run([PY, "-m", "loopx", *args], env={**env, **extra}, capture_output=True, text=True, timeout=300)
    return p


def J(p):
    assert p.returncode == 0, (p.stdout, p.stderr)
    return json.loads(p.stdout)


@pytest.mark.parametrize("stamp_exit", [0, 3])
def test_the_shell_executor_runs_a_plugins_step_and_a_failing_one_fails_the_turn(stamp_env, tmp_path, stamp_exit):
    env = stamp_env
    g = J(run(env, "project_prompt", "create", "--title", "Stamp", "--json"))["id"]
    J(run(env, "action", "add", "--goal-id", g, "--name", "after", "--json", "--", PY, "-c",
          "print('ran')"))  # a confined step writes only its workdir
    J(run(env, "todo", "add", "--goal-id", g, "--text", "stamp it", "--json"))
    # A real contract lists the plugin's step as a do step, after the goal's own actions.
    first = J(run(env, "quota", "should-run", "--goal-id", g, "--json"))
    steps = [s["id"] for s in first["interaction_contract"]["cli_channel"]["steps"]]
    assert steps == ["claim", "action:after", "stamp:mark", "done", "finish"]
    J(run(env, "run", "finish", "--run-id", first["interaction_contract"]["run_id"], "--outcome", "partial", "--json"))
    t = run(env, "turn", "--goal-id", g, "--executor", "shell", "--json", STAMP_EXIT=str(stamp_exit))
    # A turn that ran and failed exits 1 (loopx turn's TURN_EXIT), still printing its JSON.
    assert t.returncode == (0 if stamp_exit == 0 else 1), (t.stdout, t.stderr)
    t_out = json.loads(t.stdout)
    stamps = (tmp_path / "stamps").read_text().split()
    assert stamps == [t_out["run_id"]]  # the plugin's step ran, under the turn's run
    todo = J(run(env, "todo", "list", "--goal-id", g, "--json"))[0]
    shown = J(run(env, "run", "show", "--run-id", t_out["run_id"], "--json"))
    if stamp_exit == 0:
        assert t_out["outcome"] == "ok" and todo["status"] == "done", t_out
    else:
        assert t_out["outcome"] == "failed" and todo["status"] == "open", t_out
        assert "step stamp:mark failed (exit 3)" in t_out["handoff"] and "stamped" in t_out["handoff"]
    assert shown["outcome"] == t_out["outcome"]

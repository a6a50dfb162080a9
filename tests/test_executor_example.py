"""The minimal executor docs/plugins.md shows is real: installed as a plugin (a real entry point),
it carries out a governed ``loopx turn --executor steps-example`` under the turn's confinement,
and stops when the core asks it to (its ``interrupt()``), as the api.executors.Executor Protocol says."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.plugin_site import plugin_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")

MARK = re.compile(r"<!-- example-executor: (\S+) -->\n```python\n(.*?)\n```", re.S)


@pytest.fixture
def example(tmp_path, sqlite_url):
    """``run(*args)`` for a real ``loopx`` with the documented example installed, working in ``work``."""
    found = MARK.search((ROOT / "docs" / "plugins.md").read_text())
    assert found, "docs/plugins.md has no marked example executor"
    path, code = found.groups()
    module = tmp_path / "site" / path
    module.parent.mkdir(parents=True)
    module.write_text(code + "\n")
    env = plugin_env(tmp_path, sqlite_url, example=path.split("/")[0])
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()

    def run(*args, **kw):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], env=env, cwd=work,
                           capture_output=True, text=True, timeout=120, **kw)
        assert "Traceback" not in p.stderr, p.stderr
        return p

    def spawn(*args):
        return subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", *args], env=env, cwd=work,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    run.spawn, run.work, run.module = spawn, work, module.parent
    return run


def _goal(run, *actions) -> str:
    p = run("project-prompt", "create", "--title", "t", "--description", "d")
    assert p.returncode == 0, p.stderr
    gid = json.loads(p.stdout)["id"]
    for name, script in actions:
        p = run("action", "add", "--goal-id", gid, "--name", name, "--", "sh", "-c", script)
        assert p.returncode == 0, p.stderr
    assert run("todo", "add", gid, "--text", "work").returncode == 0
    return gid


def _workspace(run, goal_id: str) -> Path:
    """The goal's workspace (loopx/domain/workspace.py), where its steps run (planned before its first turn)."""
    p = run("workspace", "show", goal_id)
    assert p.returncode == 0, p.stderr
    return Path(json.loads(p.stdout)["workspace"])


def _until(predicate, what, limit=30.0):
    # Waits for what another process does (a file written), not for time to pass.
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_documented_example_imports_only_the_plugin_api(example):
    from loopx import api

    assert api.testing.check_plugin_imports(str(example.module)) == []
    listed = {p["name"]: p for p in json.loads(example("plugins").stdout)}
    assert listed["example"]["hooks"] == ["loopx_register_executors"]
    sys.path.insert(0, str(example.module.parent))
    try:
        import loopx_steps_example
    finally:
        sys.path.remove(str(example.module.parent))
    provider = loopx_steps_example.StepsExample()
    assert isinstance(provider, api.executors.Executor) and isinstance(provider, api.executors.InterruptibleExecutor)


@pytest.mark.slow
def test_a_governed_turn_through_the_example_runs_confined(example):
    # Outside the step's workdir (the goal's workspace): the user's own checkout, the turn's directory.
    outside = example.work / "outside.txt"
    g = _goal(example, ("build", "echo fine > new-file.txt"))
    p = example("turn", g, "--executor", "steps-example")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)
    assert t["outcome"] == "ok", t
    assert (_workspace(example, g) / "new-file.txt").read_text() == "fine\n"  # in the goal's workspace
    assert "ran [" in t["handoff"] and "unconfined" not in t["handoff"]
    shown = json.loads(example("run", "show", "--run-id", t["run_id"]).stdout)
    kinds = [e["kind"] for e in shown["evidence"]]
    assert "unconfined" not in kinds and "command" in kinds  # the exec recorded its own evidence
    # The steps ran as confined children: a write outside the workdir is refused, and the turn says so.
    g = _goal(example, ("escape", f"echo escaped > {outside}"))
    t = json.loads(example("turn", g, "--executor", "steps-example").stdout)
    assert t["outcome"] == "failed" and not outside.exists(), t
    # The same step with confinement turned off by the user does write there: it is the turn's
    # policy, applied through run_command, that stopped it.
    g = _goal(example, ("escape", f"echo escaped > {outside}"))
    t = json.loads(example("turn", g, "--executor", "steps-example", "--unconfined").stdout)
    assert outside.read_text() == "escaped\n" and t["handoff"].startswith("[unconfined]"), t


@pytest.mark.slow
def test_the_core_interrupts_the_example_it_starts_no_new_step(example):
    # The steps run in the goal's workspace (their directory): the files they touch and wait for are there.
    g = _goal(example, ("first", "touch started; while [ ! -e go ]; do sleep 0.05; done; echo done > first"),
              ("second", "touch second"))
    work = _workspace(example, g)
    turn = example.spawn("turn", g, "--executor", "steps-example", "--grace-seconds", "60")
    _until(lambda: (work / "started").exists(), "the first step to start")
    os.kill(turn.pid, signal.SIGTERM)
    time.sleep(0.3)  # the signal is delivered before the step ends (not a wait for time to pass)
    (work / "go").touch()
    out, err = turn.communicate(timeout=60)
    assert turn.returncode == 128 + signal.SIGTERM, err
    doc = json.loads(out)
    assert doc["outcome"] == "interrupted"
    assert (work / "first").read_text() == "done\n"  # the running step finished
    assert not (work / "second").exists()  # interrupt() was called: the example started no other
    assert doc["handoff"].startswith("interrupted by SIGTERM; asked to stop before "), doc["handoff"]

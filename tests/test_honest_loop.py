"""A harness that does exactly what the contract lists records the truth.

The README's harness loop is taken verbatim from README.md, and the seed's ``for`` loop from the
seed's text (with ``IFS`` set to a newline, as the walkthrough test does); both run in bash as
real processes against goals whose actions fail at each position. Afterwards the run's outcome,
the todos, ``summary_all`` and ``status`` must all tell the truth. The goal is made, and what the
loop left is read, by the same commands in this process (tests/cli_helpers.py): the loop's own
``loopx`` calls are the real processes the test is about.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import loopx_in_process
from tests.conftest import ROOT, loopx_env
from tests.factories import make_goal
from tests.test_seed_walkthrough import ADAPTATIONS, SEED_STEPS

pytestmark = pytest.mark.slow  # 16 real-process harness loops, seconds each: not in the quick tier

PY = sys.executable
ACTIONS = ("fetch", "fit", "report")


def readme_loop() -> str:
    """The bash block of README.md's "What an agent harness runs", verbatim."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### What an agent harness runs", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def seed_loop() -> str:
    """Step 5 of the seed's walkthrough, with the IFS adaptation the walkthrough test applies."""
    start = SEED_STEPS.index("for cmd in $(")
    loop = SEED_STEPS[start:SEED_STEPS.index("done", start) + len("done")] + "\n"
    for old, new, _why in ADAPTATIONS[2:]:
        loop = loop.replace(old, new)
    assert loop.startswith("IFS=$'\\n'") and loop.rstrip().endswith("unset IFS"), loop
    return loop


def _shim(tmp_path: Path) -> str:
    """A directory with a ``loopx`` that runs this checkout's LoopX (what `pip install` puts on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "loopx").write_text(f"#!/bin/sh\nexec {PY} -m loopx \"$@\"\n")
    (bin_dir / "loopx").chmod(0o755)
    return str(bin_dir)


def cli(url, *args, env=None):
    """``loopx ARGS`` in this process: the reads that check what the harness's real processes left,
    and the set-up before it runs (tests/cli_helpers.py)."""
    return loopx_in_process(*args, env=loopx_env(url, **(env or {})))


def ok_json(url, *args):
    args = list(args)
    at = args.index("--") if "--" in args else len(args)
    r = cli(url, *args[:at], "--json", *args[at:])
    assert r.code == 0, (args, r.out, r.err)
    return json.loads(r.out)


def goal_failing_at(url, tmp_path, position: int | None) -> tuple[str, str, Path]:
    """A goal with three actions (the one at ``position`` exits 5) and one todo; and its log file."""
    log = tmp_path / "work" / "ran.log"
    acts = {name: [PY, "-c", f"open({str(log)!r}, 'a').write('{name}\\n'); print('{name} says exit {code}'); "
                              f"raise SystemExit({code})"]
            for name, code in ((name, 5 if i == position else 0) for i, name in enumerate(ACTIONS))}
    made = make_goal(lambda *a: cli(url, *a), title="Honest loop", acts=acts, todo_texts=("Fit the forecast",))
    return made["goal"], made["todos"][0], log


def run_loop(url, tmp_path, script: str, goal_id: str) -> subprocess.CompletedProcess:
    env = loopx_env(url)
    env["PATH"] = _shim(tmp_path) + os.pathsep + env["PATH"]
    env["GOAL_ID"] = goal_id
    # The harness works in a directory of its own, not beside the registry: `loopx exec` confines
    # the actions it runs to their workdir, and the registry's directory is never writable.
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("loop", ["readme", "seed"])
@pytest.mark.parametrize("position", [None, 0, 1, 2])
def test_the_harness_loops_record_the_truth_wherever_an_action_fails(registry_url, tmp_path, loop, position):
    url = registry_url
    g, todo, log = goal_failing_at(url, tmp_path, position)
    script = readme_loop() if loop == "readme" else seed_loop()
    p = run_loop(url, tmp_path, script, g)
    assert p.returncode in (0, 1), (p.stdout, p.stderr)
    [run] = ok_json(url, "run", "list", "--goal-id", g)
    todos = ok_json(url, "todo", "list", "--goal-id", g)
    summary = ok_json(url, "summary_all", "--goal-id", g)["goals"][0]["runs"]
    status = ok_json(url, "status", "--goal-id", g)
    ran = log.read_text().split() if log.exists() else []
    if position is None:
        assert ran == list(ACTIONS)
        assert (run["status"], run["outcome"]) == ("finished", "ok")
        assert [t["status"] for t in todos] == ["done"]
        assert summary["by_outcome"] == {"ok": 1, "partial": 0, "failed": 0, "interrupted": 0, "abandoned": 0}
        assert "run_failed" not in status["attention"]
        return
    failed = ACTIONS[position]
    # The README's loop stops at the failing step; the seed's evals every line, and is still truthful.
    assert ran == (list(ACTIONS[: position + 1]) if loop == "readme" else list(ACTIONS))
    if loop == "readme":
        assert "Stopped: that step failed" in p.stdout
    assert (run["status"], run["outcome"]) == ("finished", "failed"), run
    assert f"step action:{failed} failed (exit 5): {failed} says exit 5" in run["handoff"]
    assert f"todo {todo} stays open" in run["handoff"]
    assert [t["status"] for t in todos] == ["open"]
    assert summary["by_outcome"] == {"ok": 0, "partial": 0, "failed": 1, "interrupted": 0, "abandoned": 0}
    assert "run_failed" in status["attention"]
    overview = ok_json(url, "status")
    # Shown (run_failed), but one failed run needs no person yet: agents retry it (loopx.views.needs_you).
    assert overview["counts"]["attention"] == 0 and overview["goals"][0]["needs_you"] is None
    if loop == "seed":
        # The todo done line was refused, and said why.
        assert "[step_failed]" in p.stderr and f"step action:{failed} failed (exit 5)" in p.stderr


def test_placeholder_text_is_nowhere_in_a_contract(registry_url, tmp_path):
    g, _todo, _log = goal_failing_at(registry_url, tmp_path, None)
    out = ok_json(registry_url, "quota", "should-run", "--goal-id", g)
    text = json.dumps(out)
    assert "what was done" not in text and "the first step" not in text and "the next step" not in text
    finish = out["interaction_contract"]["cli_channel"]["steps"][-1]
    assert finish["kind"] == "finish" and "--outcome" not in finish["argv"]


def test_after_a_failed_run_summary_all_counts_its_todo_ready_as_should_run_offers_it(registry_url, tmp_path):
    """The failed run's claim holds nothing once the run ended: summary-all, status and the next
    should-run (for any agent) agree that the todo is ready."""
    url = registry_url
    made = make_goal(lambda *a: cli(url, *a), title="Fails once", acts={"work": ["sh", "-c", "exit 3"]},
                     todo_texts=("Do it",))
    g, todo = made["goal"], made["todos"][0]
    p = run_loop(url, tmp_path, readme_loop(), g)
    assert "Stopped: that step failed" in p.stdout, (p.stdout, p.stderr)
    [run] = ok_json(url, "run", "list", "--goal-id", g)
    assert (run["status"], run["outcome"]) == ("finished", "failed"), run
    # The claim the failed run took is still on the todo (its lease has not run out) ...
    [held] = ok_json(url, "todo", "list", "--goal-id", g)
    assert held["claim"] is not None and held["claim"]["run_id"] == run["id"], held
    # ... but it no longer holds the todo back: every view counts it ready.
    todos = ok_json(url, "summary-all", "--goal-id", g)["goals"][0]["todos"]
    assert todos["ready"] == 1, todos
    assert ok_json(url, "status", "--goal-id", g)["todos"]["ready"] == [todo]
    assert [t["id"] for t in ok_json(url, "todo", "list", "--goal-id", g, "--ready")] == [todo]
    for agent in (run["agent"], "another-agent"):
        offer = ok_json(url, "quota", "should-run", "--goal-id", g, "--agent", agent, "--dry-run")
        assert offer["decision"] == "run", offer
        assert [t["id"] for t in offer["interaction_contract"]["agent_channel"]["ready_todos"]] == [todo], offer
    # And another agent may take it over (a new claim, the next epoch).
    taken = ok_json(url, "todo", "claim", "--goal-id", g, "--todo-id", todo, "--agent", "another-agent")
    assert taken["claim"]["agent"] == "another-agent" and taken["epoch"] == held["epoch"] + 1, taken

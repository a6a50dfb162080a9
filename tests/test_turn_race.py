"""Concurrency with real processes: 8 agents asking ``should-run`` for one goal at once open
exactly one run; 8 processes of one agent all get that same run back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import loopx_env
from tests.factories import make_goal

N = 8


def _ask_all(url: str, g: str, agents: list[str]) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "quota", "should-run",
                               "--goal-id", g, "--agent", a],
                              env=loopx_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a in agents]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    return outs


def _runs(loopx_proc, g) -> list[dict]:
    return loopx_proc("run", "list", "--goal-id", g, "--json").json


@pytest.mark.slow
def test_eight_agents_at_once_open_exactly_one_run(loopx_proc):
    g = make_goal(loopx_proc, title="Race", todo_texts=("the only step",))["goal"]
    outs = _ask_all(loopx_proc.url, g, [f"agent-{i}" for i in range(N)])
    decisions = sorted(o["decision"] for o in outs)
    assert decisions == ["run"] + ["wait"] * (N - 1), decisions
    assert all(o["reasons"] == ["run_in_progress"] for o in outs if o["decision"] == "wait")
    opened = _runs(loopx_proc, g)
    assert len(opened) == 1
    winner = next(o for o in outs if o["decision"] == "run")
    assert opened[0]["id"] == winner["interaction_contract"]["run_id"]
    assert loopx_proc("quota", "show", "--goal-id", g, "--json").json["used"]["turns"] == 1


@pytest.mark.slow
def test_eight_processes_of_one_agent_share_one_run(loopx_proc):
    g = make_goal(loopx_proc, title="Race", todo_texts=("the only step",))["goal"]
    outs = _ask_all(loopx_proc.url, g, ["same"] * N)
    assert {o["decision"] for o in outs} == {"run"}
    assert len({o["interaction_contract"]["run_id"] for o in outs}) == 1
    assert len(_runs(loopx_proc, g)) == 1

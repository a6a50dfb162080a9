"""Wall-clock budgets are enforced on real processes: `exec` stops at the run's lease or the
goal's remaining wall budget, and parallel runs reserve their share when they open.

The action runs 60 s against budgets of 3 s; a step's duration is checked against the budget
with 5 s to spare for a loaded machine (a kill and a reap that wait for a core), not 0.2 s."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal


def cli(url, *args, agent=None):
    env = loopx_env(url, **({"LOOPX_AGENT": agent} if agent else {}))
    p = subprocess.run([sys.executable, "-m", "loopx", *args], env=env, capture_output=True, text=True, timeout=120)
    return p


def _goal(url, wall, parallel=False):
    return make_goal(in_process(url), title="slow work", parallel=parallel, limits={"max_wall_seconds": wall},
                     acts={"slow": ["sleep", "60"]})["goal"]


def _used(url, g):
    return json.loads(cli(url, "quota", "show", "--goal-id", g, "--json").stdout)["used"]["wall_seconds"]


@pytest.mark.slow
def test_a_sixty_second_action_under_a_three_second_budget_stops_at_three(registry_url):
    g = _goal(registry_url, 3)
    d = json.loads(cli(registry_url, "quota", "should-run", "--goal-id", g, "--json").stdout)
    assert d["decision"] == "run", d
    run_id = d["interaction_contract"]["run_id"]
    p = cli(registry_url, "exec", "--run-id", run_id, "--action", "slow", "--json")
    assert p.returncode in (0, 1), p.stderr  # 1: the command did not succeed (it was stopped)
    result = json.loads(p.stdout)
    assert result["data"]["timed_out"] is True
    # Stopped at the budget (less what passed before exec started), never the full 60 s.
    assert result["data"]["duration_seconds"] <= 3 + 5, result["data"]
    cli(registry_url, "run", "finish", "--run-id", run_id, "--outcome", "partial")
    assert _used(registry_url, g) <= 3.0


@pytest.mark.slow
def test_four_parallel_runs_never_use_more_than_the_budget(registry_url):
    from loopx.views.should_run import should_run
    from loopx.ledger.registry import Registry

    g = _goal(registry_url, 12, parallel=True)
    run_ids = []
    with Registry.open(registry_url) as reg:  # opened back to back, so no lease runs out meanwhile
        for i in range(4):
            d = should_run(reg, "user", goal_id=g, agent=f"a{i}", ttl_seconds=3)
            assert d["decision"] == "run", d
            run_ids.append(d["interaction_contract"]["run_id"])
        # The whole budget is reserved: a fifth agent waits instead of getting the remainder too.
        fifth = should_run(reg, "user", goal_id=g, agent="a4")
        assert fifth["decision"] == "wait" and fifth["reasons"] == ["wall_budget_reserved"], fifth
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "exec", "--run-id", r, "--action", "slow", "--json"],
                              env=loopx_env(registry_url), stdout=subprocess.PIPE, text=True) for r in run_ids]
    for p in procs:
        out, _ = p.communicate(timeout=60)
        answer = json.loads(out)
        if "error" in answer:  # a loaded machine started it after the lease ended: refused, not run
            assert answer["error"]["code"] == "run_not_open", answer
        else:
            assert answer["data"]["timed_out"] is True and answer["data"]["duration_seconds"] <= 3 + 5, answer
    for r in run_ids:
        cli(registry_url, "run", "finish", "--run-id", r, "--outcome", "partial")
    assert _used(registry_url, g) <= 12.0


def test_a_run_opened_while_others_hold_the_budget_waits(registry_url):
    g = _goal(registry_url, 4, parallel=True)
    first = json.loads(cli(registry_url, "quota", "should-run", "--goal-id", g, "--agent", "a1", "--json").stdout)
    assert first["decision"] == "run"
    second = json.loads(cli(registry_url, "quota", "should-run", "--goal-id", g, "--agent", "a2", "--json").stdout)
    assert second["decision"] == "wait" and second["reasons"] == ["wall_budget_reserved"], second

"""The goal view's history (run timeline, cumulative usage, reward trend), the last contract and
the commands that decide a pending gate, through `loopx status G --json` on every backend."""

from __future__ import annotations

import shlex
from tests.factories import make_goal

import pytest


@pytest.mark.slow
def test_goal_view_history_contract_and_gate_commands(loopx_proc):
    def j(*args, actor=None):
        r = loopx_proc(*args, "--json", env={"LOOPX_ACTOR": actor} if actor else None)
        assert r.code == 0, r
        return r.json

    g = j("project-prompt", "create", "--title", "history")["id"]
    j("quota", "set", g, "--max-turns", "5", "--max-tokens", "1000")
    empty = j("status", g)
    assert empty["history"] == {"runs": [], "usage": [], "rewards": []} and empty["last_contract"] is None

    runs = []
    for outcome, tokens, evidence in (("ok", 100, 2), ("failed", 300, 0), ("partial", 50, 1)):
        contract = j("quota", "should-run", g)
        run = contract["interaction_contract"]["run_id"]
        for i in range(evidence):
            j("evidence", "add", "--run-id", run, "--kind", "note", "--summary", f"n{i}", actor="executor")
        j("run", "finish", "--run-id", run, "--outcome", outcome, "--tokens", str(tokens), actor="executor")
        runs.append((run, contract))
    j("reward", "add", g, "--run-id", runs[0][0], "--score", "1")
    j("reward", "add", g, "--run-id", runs[1][0], "--score", "-0.5")
    open_run = j("quota", "should-run", g)["interaction_contract"]
    gate = j("gate", "add", g, "--title", "ship", "--scope", "production")

    view = j("status", g)
    h = view["history"]
    assert [r["id"] for r in h["runs"]] == [r for r, _ in runs] + [open_run["run_id"]]
    assert [r["state"] for r in h["runs"]] == ["finished"] * 3 + ["open"]
    assert [r["outcome"] for r in h["runs"]] == ["ok", "failed", "partial", None]
    assert [r["evidence"] for r in h["runs"]] == [2, 0, 1, 0]
    assert all(r["duration_seconds"] >= 0 for r in h["runs"])
    assert [(u["turns"], u["tokens"]) for u in h["usage"]] == [(1, 100), (2, 400), (3, 450), (4, 450)]
    last = h["usage"][-1]
    assert {k: last[k] for k in ("turns", "tokens", "cost")} == {k: view["quota"]["used"][k] for k in ("turns", "tokens", "cost")}
    assert [(w["score"], w["mean"]) for w in h["rewards"]] == [(1.0, 1.0), (-0.5, 0.25)]

    c = view["last_contract"]
    assert c["run_id"] == open_run["run_id"] and c["contract_id"] == open_run["contract_id"]
    assert c["decision"] == "run" and c["next_cli_actions"] == open_run["cli_channel"]["next_cli_actions"]
    assert [s["command"] for s in c["steps"]] == open_run["cli_channel"]["next_cli_actions"]
    assert [s["kind"] for s in c["steps"]] == [s["kind"] for s in open_run["cli_channel"]["steps"]]

    pending = view["gates"]["pending"][0]
    assert pending["decide"]["approve"] == f"loopx gate approve --goal-id {g} --gate-id {gate['id']}"
    # The command works exactly as printed.
    argv = shlex.split(pending["decide"]["approve"])
    assert argv[0] == "loopx"
    r = loopx_proc(*argv[1:], "--json")
    assert r.code == 0 and r.json["status"] == "approved", r


def test_terminal_overview_never_says_no_goals_when_there_are_closed_ones(loopx_proc):
    assert loopx_proc("status").out.splitlines()[-1] == "no goals"
    g = make_goal(loopx_proc, title="done and dusted")["goal"]
    assert loopx_proc("project-prompt", "close", g).code == 0
    out = loopx_proc("status").out
    assert "no goals" not in out and "1 closed (loopx status --all shows them)" in out
    assert "done and dusted" in loopx_proc("status", "--all").out

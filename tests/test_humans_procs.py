"""Humans in the loop, proved with real ``python -m loopx`` processes on a shared registry.

What a test is about - the racing claims, an executor's refused verb, a lease that ran out, the
export a reader stops early - runs as real processes; the goals, runs and read-backs it stands on
are the same commands in this process (tests/cli_helpers.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest

from tests.cli_helpers import loopx_in_process
from tests.conftest import loopx_env

EXECUTOR = {"LOOPX_ACTOR": "executor"}


def ok(result):
    assert result.code == 0, result
    return result.json


def in_process(loopx_proc):
    """``loopx_proc``'s commands, in this process: for set-up and read-backs."""
    return lambda *args, env=None: loopx_in_process(*args, env=loopx_env(loopx_proc.url, **(env or {})))


def open_run(loopx_proc, goal, agent):
    doc = ok(in_process(loopx_proc)("quota", "should-run", "--goal-id", goal, "--agent", agent, "--json"))
    assert doc["decision"] == "run", doc
    return doc["interaction_contract"]["run_id"]


@pytest.mark.slow
def test_eight_agents_claiming_one_todo_at_once_leave_exactly_one_holder(loopx_proc):
    call = in_process(loopx_proc)
    goal = ok(call("project_prompt", "create", "--title", "Race", "--parallel-runs", "--json"))["id"]
    todo = ok(call("todo", "add", "--goal-id", goal, "--text", "the one job", "--json"))["id"]
    agents = [f"agent-{i}" for i in range(8)]
    runs = {a: open_run(loopx_proc, goal, a) for a in agents}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "loopx", "todo", "claim", "--goal-id", goal, "--todo-id", todo,
             "--run-id", runs[a], "--json"],
            env=loopx_env(loopx_proc.url, **EXECUTOR), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for a in agents
    ]
    outcomes = []
    for a, p in zip(agents, procs):
        out, err = p.communicate(timeout=180)
        outcomes.append((a, p.returncode, json.loads(out)))
    winners = [(a, doc) for a, code, doc in outcomes if code == 0]
    losers = [doc["error"]["code"] for a, code, doc in outcomes if code != 0]
    assert len(winners) == 1, outcomes
    assert losers == ["todo_claimed"] * 7, outcomes
    winner, doc = winners[0]
    assert doc["claim"]["agent"] == winner and doc["claim"]["epoch"] == 1 and doc["claim"]["run_id"] == runs[winner]
    listed = ok(call("todo", "list", "--goal-id", goal, "--json"))
    assert listed[0]["claim"]["agent"] == winner
    # Exactly one claim event reached the ledger.
    kinds = [e["kind"] for e in ok(call("history", "--goal-id", goal, "--json"))]
    assert kinds.count("todo.claimed") == 1


@pytest.mark.slow
def test_expired_lease_is_retaken_and_the_old_holders_done_is_refused(loopx_proc, loopx_clock):
    call = in_process(loopx_proc)
    goal = ok(call("project_prompt", "create", "--title", "Leases", "--parallel-runs", "--json"))["id"]
    todo = ok(call("todo", "add", "--goal-id", goal, "--text", "fit", "--json"))["id"]
    r1, r2 = open_run(loopx_proc, goal, "slow"), open_run(loopx_proc, goal, "fast")
    first = ok(loopx_proc("todo", "claim", "--goal-id", goal, "--todo-id", todo, "--run-id", r1,
                          "--ttl-seconds", "60", "--json", env=EXECUTOR))
    assert first["claim"]["agent"] == "slow"
    r = loopx_proc("todo", "claim", "--goal-id", goal, "--todo-id", todo, "--run-id", r2, "--json", env=EXECUTOR)
    assert r.code == 2 and r.json["error"]["code"] == "todo_claimed", r  # the lease holds ...
    loopx_clock.advance(61)  # ... until it runs out (every loopx process the test starts follows)
    r = loopx_proc("todo", "claim", "--goal-id", goal, "--todo-id", todo, "--run-id", r2, "--json", env=EXECUTOR)
    taken = ok(r)
    assert taken["claim"]["agent"] == "fast" and taken["claim"]["epoch"] == first["claim"]["epoch"] + 1
    late = loopx_proc("todo", "done", "--goal-id", goal, "--todo-id", todo, "--run-id", r1, "--note", "late",
                      "--json", env=EXECUTOR)
    assert late.code == 2 and late.json["error"]["code"] == "lease_lost", late
    assert ok(call("todo", "list", "--goal-id", goal, "--json"))[0]["status"] == "open"
    done = ok(loopx_proc("todo", "done", "--goal-id", goal, "--todo-id", todo, "--run-id", r2, "--note", "fitted",
                         "--json", env=EXECUTOR))
    assert done["status"] == "done" and done["note"] == "fitted"


@pytest.mark.slow
def test_executor_gate_decision_is_refused_but_its_request_is_recorded(loopx_proc):
    goal = ok(in_process(loopx_proc)("project_prompt", "create", "--title", "Gates", "--json"))["id"]
    gate = ok(loopx_proc("gate", "add", "--goal-id", goal, "--title", "Deploy to production?", "--scope",
                         "production", "--json", env=EXECUTOR))
    assert gate["requested_by"] == "executor"
    for verb in ("approve", "reject"):
        r = loopx_proc("gate", verb, "--goal-id", goal, "--gate-id", gate["id"], "--json", env=EXECUTOR)
        assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden", r
        text = loopx_proc("gate", verb, "--goal-id", goal, "--gate-id", gate["id"], env=EXECUTOR)
        assert text.code == 2 and text.out == ""
        assert text.err.strip().endswith("[actor_forbidden]") and len(text.err.strip().splitlines()) == 1
    assert ok(loopx_proc("gate", "list", "--goal-id", goal, "--pending", "--json"))[0]["id"] == gate["id"]
    # The pending gate stops the goal: should-run asks the user, with the exact commands.
    doc = ok(loopx_proc("quota", "should-run", "--goal-id", goal, "--json"))
    assert doc["decision"] == "ask_user" and "gate_pending" in doc["reasons"]
    user_actions = " ".join(doc["interaction_contract"]["user_channel"]["next_user_actions"])
    assert f"loopx gate approve --goal-id {goal} --gate-id {gate['id']}" in user_actions
    assert ok(loopx_proc("gate", "approve", "--goal-id", goal, "--gate-id", gate["id"], "--json"))["decided_by"] == "user"


def test_executor_reward_is_refused(loopx_proc):
    call = in_process(loopx_proc)
    goal = ok(call("project_prompt", "create", "--title", "Rewards", "--json"))["id"]
    run_id = open_run(loopx_proc, goal, "a1")
    ok(call("run", "finish", "--run-id", run_id, "--outcome", "ok", "--json", env=EXECUTOR))
    r = loopx_proc("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "1", "--json", env=EXECUTOR)
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden", r
    assert ok(call("reward", "list", "--goal-id", goal, "--json")) == []


@pytest.mark.slow
def test_export_round_trips_through_a_file(loopx_proc, tmp_path):
    import jsonschema

    schema = json.loads(resources.files("loopx").joinpath("schemas/reward_record.json").read_text())
    call = in_process(loopx_proc)
    goal = ok(call("project_prompt", "create", "--title", "Export", "--json"))["id"]
    ok(call("action", "add", "--goal-id", goal, "--name", "fit", "--json", "--", sys.executable, "-c", "print('fit')"))
    scores = []
    for i, score in enumerate(("1.0", "-0.5", "0.25")):
        run_id = open_run(loopx_proc, goal, "a1")
        ok(loopx_proc("exec", "--run-id", run_id, "--action", "fit", "--json", env=EXECUTOR))
        ok(call("run", "finish", "--run-id", run_id, "--outcome", "ok", "--tokens", str(100 * (i + 1)),
                "--handoff", f"note {i}", "--json", env=EXECUTOR))
        ok(call("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", score,
                "--comment", f"comment {i}", "--json"))
        scores.append(float(score))
    out = tmp_path / "rewards.jsonl"
    with out.open("w") as fh:
        p = subprocess.run([sys.executable, "-m", "loopx", "reward", "export"], env=loopx_env(loopx_proc.url),
                           stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    validator = jsonschema.Draft202012Validator(schema)
    for rec in records:
        validator.validate(rec)
    assert [r["reward"]["score"] for r in records] == scores
    assert [r["run"]["handoff"] for r in records] == ["note 0", "note 1", "note 2"]
    assert [r["run"]["tokens"] for r in records] == [100, 200, 300]
    # Each run's evidence: its step's start (the claim exec takes) and the step's result.
    assert all(r["evidence_total"] == 2 and [e["kind"] for e in r["evidence"]] == ["step_started", "command"]
               for r in records)
    assert all(r["contract"]["document"]["run_id"] == r["run"]["id"] for r in records)
    stored = ok(call("reward", "list", "--goal-id", goal, "--json"))
    assert [r["reward"]["id"] for r in records] == [w["id"] for w in stored]


def test_export_to_a_reader_that_stops_early_ends_cleanly(loopx_proc):
    from loopx.domain import rewards
    from loopx.ledger.registry import Registry

    call = in_process(loopx_proc)
    goal = ok(call("project_prompt", "create", "--title", "Head", "--json"))["id"]
    ok(call("todo", "add", "--goal-id", goal, "--text", "x", "--json"))
    run_id = open_run(loopx_proc, goal, "a1")
    with Registry.open(loopx_proc.url) as reg:
        for i in range(200):  # well past a pipe buffer of records
            rewards.add(reg, "user", goal_id=goal, run_id=run_id, score=0.5, comment=f"note {i} " + "x" * 500)
    p = subprocess.Popen([sys.executable, "-m", "loopx", "reward", "export"], env=loopx_env(loopx_proc.url),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = json.loads(p.stdout.readline())
    p.stdout.close()  # like `| head -1`
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0, err
    assert err == b""
    assert first["reward"]["comment"].startswith("note 0 ")

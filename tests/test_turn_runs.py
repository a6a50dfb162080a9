"""Runs and quota: opening charges a turn, the same agent gets its run back, expiry abandons,
finish records usage, budgets exhaust and grants reopen them, cadence waits, and usage is
always what the ledger says."""

from __future__ import annotations

import shlex

import pytest

from loopx.values import clock
from loopx.ledger import log as ledger
from loopx.views import quota
from loopx.domain import runs
from tests.test_turn_helpers import ask, count, make_goal


def test_run_decision_opens_one_run_and_charges_one_turn(reg):
    g = make_goal(reg, limits={"max_turns": 5})["goal"]
    out = ask(reg, g)
    c = out["interaction_contract"]
    assert c["quota"]["used"]["turns"] == 1 and c["quota"]["remaining"]["turns"] == 4
    with reg.read() as tx:
        run = runs.load_run(tx, c["run_id"])
        assert run.status == "open" and run.agent == "me" and run.contract_id == c["contract_id"]
        assert runs.load_contract(tx, c["contract_id"]) == c
        assert quota.usage(tx, g).turns == 1


def test_the_same_agent_asking_again_gets_its_open_run_back(reg):
    g = make_goal(reg, limits={"max_turns": 1})["goal"]
    first = ask(reg, g)
    # Even with a budget of one turn, already spent on this very run, it is handed back.
    again = ask(reg, g)
    assert again["decision"] == "run"
    assert again["interaction_contract"] == first["interaction_contract"]
    assert count(reg, "SELECT COUNT(*) AS n FROM runs WHERE goal_id = ?", (g,)) == 1
    assert count(reg, "SELECT COUNT(*) AS n FROM events WHERE goal_id = ? AND kind = 'run.opened'", (g,)) == 1


def test_dry_run_previews_and_writes_nothing(reg):
    g = make_goal(reg)["goal"]
    with reg.read() as tx:
        before = tx.one("SELECT revision FROM goals WHERE id = ?", (g,))["revision"]
    out = ask(reg, g, dry_run=True)
    assert out["dry_run"] is True and out["decision"] == "run"
    with reg.read() as tx:
        assert tx.one("SELECT revision FROM goals WHERE id = ?", (g,))["revision"] == before
    assert count(reg, "SELECT COUNT(*) AS n FROM runs") == 0


def test_expired_runs_are_abandoned_and_stop_counting_as_open(reg, loopx_clock):
    g = make_goal(reg, todo_texts=("a", "b"))["goal"]
    held = ask(reg, g, agent="slow", ttl_seconds=60)["interaction_contract"]
    assert ask(reg, g, agent="fast")["reasons"] == ["run_in_progress"]
    loopx_clock.advance(61)  # the lease runs out
    out = ask(reg, g, agent="fast")
    assert out["decision"] == "run"
    with reg.read() as tx:
        slow = runs.load_run(tx, held["run_id"])
        assert slow.status == "abandoned" and slow.finished_at == slow.expires_at
        # The abandoned run's wall time is charged up to its expiry, from the ledger.
        assert quota.usage(tx, g).wall_seconds == pytest.approx(clock.seconds_between(slow.opened_at, slow.expires_at), abs=1e-3)
    # Doing anything under it is refused; a late report is still recorded.
    from loopx.values.errors import LoopxError

    with reg.read() as tx, pytest.raises(LoopxError) as err:
        runs.check_fresh(tx, held["run_id"])
    assert err.value.code == "run_not_open"
    late = runs.finish(reg, "user", run_id=held["run_id"], outcome="partial", tokens=7)
    assert late["late"] is True and late["status"] == "finished"


def test_finish_records_outcome_usage_and_wall_time(reg):
    g = make_goal(reg)["goal"]
    r = ask(reg, g)["interaction_contract"]["run_id"]
    done = runs.finish(reg, "user", run_id=r, outcome="ok", tokens=1200, cost=0.25, handoff="next: write docs")
    assert (done["outcome"], done["tokens"], done["cost"], done["handoff"]) == ("ok", 1200, 0.25, "next: write docs")
    assert done["wall_seconds"] == pytest.approx(clock.seconds_between(done["opened_at"], done["finished_at"]), abs=1e-3)
    shown = quota.show(reg, g)
    assert shown["used"] == {"turns": 1, "tokens": 1200, "cost": 0.25, "wall_seconds": done["wall_seconds"]}
    assert shown["entries"][0]["run_id"] == r
    from loopx.values.errors import LoopxError

    with pytest.raises(LoopxError) as err:
        runs.finish(reg, "user", run_id=r, outcome="ok")
    assert err.value.code == "run_not_open"
    # The hand-off reaches the next contract.
    assert ask(reg, g)["interaction_contract"]["agent_channel"]["handoff"] == "next: write docs"


def test_usage_is_what_the_ledger_replays_to(reg):
    g = make_goal(reg, todo_texts=("a", "b", "c"), parallel=True)["goal"]
    for i, agent in enumerate(("a", "b", "c")):
        r = ask(reg, g, agent=agent)["interaction_contract"]["run_id"]
        if i < 2:
            runs.finish(reg, "user", run_id=r, outcome="ok", tokens=100 * (i + 1), cost=0.5)
    quota.grant(reg, "user", goal_id=g, amounts={"turns": 3})
    with reg.read() as tx:
        events = ledger.events(tx, g)
        live = ledger.normalise(ledger.snapshot(tx, g))
        used = quota.usage(tx, g)
    assert ledger.normalise(ledger.replayed_snapshot(events)) == live
    assert (used.turns, used.tokens, used.cost) == (3, 300, 1.0)


def test_budget_exhaustion_then_grant_through_the_cli(loopx):
    g = loopx("project_prompt", "create", "--title", "Budgeted", "--json").json["id"]
    assert loopx("quota", "set", "--goal-id", g, "--max-turns", "1").code == 0
    loopx("todo", "add", "--goal-id", g, "--text", "one")
    loopx("todo", "add", "--goal-id", g, "--text", "two")
    first = loopx("--format", "json", "quota", "should-run", "--goal-id", g).json
    assert first["decision"] == "run"
    assert loopx("run", "finish", "--run-id", first["interaction_contract"]["run_id"], "--outcome", "ok").code == 0
    out = loopx("quota", "should-run", "--goal-id", g, "--json").json
    assert (out["decision"], out["reasons"]) == ("ask_user", ["quota_exhausted", "turns_exhausted"])
    grant = f"loopx quota grant --goal-id {g} --turns 1"
    assert grant in out["interaction_contract"]["user_channel"]["next_user_actions"]
    # The command works as printed, and only a user may run it.
    refused = loopx(*shlex.split(grant)[1:], "--json", env={"LOOPX_ACTOR": "executor"})
    assert refused.code == 2 and refused.json["error"]["code"] == "actor_forbidden"
    assert loopx(*shlex.split(grant)[1:]).code == 0
    shown = loopx("quota", "show", "--goal-id", g, "--format", "json").json
    assert shown["grants"] == {"max_turns": 1} and shown["remaining"]["turns"] == 1
    assert loopx("--json", "quota", "should-run", "--goal-id", g).json["decision"] == "run"


def test_cadence_waits_with_next_eligible_at(reg, loopx_clock):
    g = make_goal(reg, limits={"cadence_seconds": 3600}, todo_texts=("a", "b"))["goal"]
    c = ask(reg, g)["interaction_contract"]
    runs.finish(reg, "user", run_id=c["run_id"], outcome="ok")
    out = ask(reg, g)
    assert (out["decision"], out["reasons"]) == ("wait", ["cadence"])
    with reg.read() as tx:
        opened = runs.load_run(tx, c["run_id"]).opened_at
    assert out["interaction_contract"]["next_eligible_at"] == clock.add_seconds(opened, 3600)
    assert quota.show(reg, g)["next_eligible_at"] == clock.add_seconds(opened, 3600)
    # The cadence elapses.
    loopx_clock.set(clock.seconds_between(clock.now(), clock.add_seconds(opened, 3590)))
    assert ask(reg, g)["reasons"] == ["cadence"]
    loopx_clock.advance(11)
    assert ask(reg, g)["decision"] == "run"


def test_user_only_commands_refuse_the_executor(loopx):
    g = loopx("project_prompt", "create", "--title", "Owned", "--json").json["id"]
    env = {"LOOPX_ACTOR": "executor"}
    for args in (["quota", "set", "--goal-id", g, "--max-turns", "3"],
                 ["quota", "grant", "--goal-id", g, "--turns", "3"],
                 ["action", "add", "--goal-id", g, "--name", "x", "--", "true"]):
        r = loopx("--json", *args, env=env)
        assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden", (args, r)


def test_bad_quota_input_is_refused(loopx):
    g = loopx("project_prompt", "create", "--title", "Bad", "--json").json["id"]
    for args in (["quota", "set", "--goal-id", g, "--max-turns", "-1"],
                 ["quota", "set", "--goal-id", g, "--max-cost", "nan"],
                 ["quota", "set", "--goal-id", g],
                 ["quota", "grant", "--goal-id", g, "--turns", "0"],
                 ["quota", "should-run", "--goal-id", g, "--ttl-seconds", "0"],
                 ["quota", "should-run", "--goal-id", "g-nothex"]):
        r = loopx(*args, "--json")
        assert r.code == 2 and r.json["error"]["code"] == "invalid_argument", (args, r)
    r = loopx("quota", "should-run", "--goal-id", "g-000000000000", "--json")
    assert r.json["error"]["code"] == "goal_not_found"
    assert loopx("quota", "set", "--goal-id", g, "--max-turns", "2", "--unset", "max_cost").code == 0
    assert loopx("quota", "show", "--goal-id", g, "--json").json["limits"]["max_turns"] == 2


def test_should_run_operation_id_retry_returns_the_first_answer(reg):
    g = make_goal(reg, todo_texts=("a",))["goal"]
    first = ask(reg, g, operation_id="turn-1")
    again = ask(reg, g, operation_id="turn-1")
    assert again == first
    assert count(reg, "SELECT COUNT(*) AS n FROM runs") == 1


def test_feedback_from_rewards_reaches_the_next_contract(reg):
    from loopx.domain import rewards

    g = make_goal(reg, todo_texts=("a", "b"))["goal"]
    r = ask(reg, g)["interaction_contract"]["run_id"]
    runs.finish(reg, "user", run_id=r, outcome="ok")
    rewards.add(reg, "user", goal_id=g, run_id=r, score=-0.5, comment="Too slow; batch the calls.")
    fb = ask(reg, g)["interaction_contract"]["agent_channel"]["feedback"]
    assert fb == [{"run_id": r, "score": -0.5, "comment": "Too slow; batch the calls."}]


def test_a_run_never_outlives_the_wall_clock_budget(reg):
    g = make_goal(reg, limits={"max_wall_seconds": 90})["goal"]
    c = ask(reg, g, ttl_seconds=3600)["interaction_contract"]
    assert clock.seconds_between(c["issued_at"], c["expires_at"]) == pytest.approx(90, abs=1e-3)
    # Abandoned, it is charged exactly what remained: the budget is spent, not overspent.
    with reg.read() as tx:
        row = tx.one("SELECT opened_at, expires_at FROM runs WHERE id = ?", (c["run_id"],))
    assert clock.seconds_between(row["opened_at"], row["expires_at"]) == pytest.approx(90, abs=1e-3)

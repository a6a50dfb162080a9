"""Rewards overlay runs (user only, score in [-1, 1]); export records validate; hand-off; summary_all."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from tests.factories import make_goal

EXECUTOR = {"LOOPX_ACTOR": "executor"}


def record_schema() -> dict:
    return json.loads(resources.files("loopx").joinpath("schemas/reward_record.json").read_text())


def validate_record(rec: dict) -> None:
    import jsonschema

    jsonschema.Draft202012Validator(record_schema()).validate(rec)


@pytest.fixture
def goal(loopx):
    return make_goal(loopx, title="Quarterly revenue", description="Explain the spike.",
                     criteria=("A report exists",))["goal"]


def turn(reg, goal, *, agent="a1", outcome="ok", tokens=100, cost=0.25, handoff=None, evidence=()):
    """One real turn through the domain API: should-run opens a run, evidence, run finish."""
    from loopx.domain import evidence as ev
    from loopx.domain import runs
    from loopx.views.should_run import should_run

    decision = should_run(reg, "user", goal_id=goal, agent=agent)
    assert decision["decision"] == "run", decision
    run_id = decision["interaction_contract"]["run_id"]
    for kind, summary in evidence:
        ev.record(reg, "executor", kind=kind, summary=summary, run_id=run_id)
    runs.finish(reg, "executor", run_id=run_id, outcome=outcome, tokens=tokens, cost=cost, handoff=handoff)
    return run_id


def test_user_scores_a_run_without_editing_it(loopx, reg, goal):
    run_id = turn(reg, goal, handoff="next: write the report")
    with reg.read() as tx:
        before = tx.one("SELECT * FROM runs WHERE id = ?", (run_id,))
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "1.0",
              "--comment", "Forecast looks accurate, keep this approach.", "--json")
    assert r.code == 0, r
    w = r.json
    assert w["score"] == 1.0 and w["author"] == "user" and w["run_id"] == run_id and w["id"].startswith("w-")
    with reg.read() as tx:
        assert tx.one("SELECT * FROM runs WHERE id = ?", (run_id,)) == before
    listed = loopx("reward", "list", "--goal-id", goal, "--json").json
    assert listed == [w]
    text = loopx("reward", "list", "--goal-id", goal).out
    assert "+1.00" in text and "keep this approach" in text


@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "1.0001", "-1.5", "abc"])
def test_bad_scores_are_refused(loopx, reg, goal, score):
    run_id = turn(reg, goal)
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", score, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument", r
    assert loopx("reward", "list", "--goal-id", goal, "--json").json == []


@pytest.mark.parametrize("score", ["-1", "0", "1", "0.5"])
def test_bounds_are_inclusive(loopx, reg, goal, score):
    run_id = turn(reg, goal)
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", score, "--json")
    assert r.code == 0 and r.json["score"] == float(score)


def test_executor_cannot_add_a_reward(loopx, reg, goal):
    run_id = turn(reg, goal)
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "1", "--json", env=EXECUTOR)
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"
    assert "only a user" in r.json["error"]["message"]
    assert loopx("reward", "list", "--goal-id", goal, "--json").json == []


def test_reward_event_writers_refuse_executors(reg, goal):
    from loopx.values.errors import LoopxError

    run_id = turn(reg, goal)
    with pytest.raises(LoopxError) as err:
        reg.mutate("executor", lambda w: w.emit("reward.added", {"reward_id": "w-000000000001", "run_id": run_id,
                                                                  "score": 1.0}), goal_id=goal)
    assert err.value.code == "actor_forbidden"


def test_the_run_must_belong_to_the_goal(loopx, reg, goal):
    other = make_goal(loopx, title="Other")["goal"]
    theirs = turn(reg, other)
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", theirs, "--score", "1", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "run_not_found"
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", "r-000000000000", "--score", "1", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "run_not_found"
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", "run-1", "--score", "1", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def test_a_closed_goals_runs_can_still_be_scored(loopx, reg, goal):
    run_id = turn(reg, goal)
    assert loopx("project_prompt", "close", "--goal-id", goal).code == 0
    r = loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "-0.5", "--json")
    assert r.code == 0 and r.json["score"] == -0.5


def test_latest_feedback_reaches_the_next_contract(loopx, reg, goal):
    from loopx.domain import rewards
    from loopx.views.should_run import should_run

    runs_ = [turn(reg, goal, agent="a1") for _ in range(4)]
    for i, run_id in enumerate(runs_):
        loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", str(i / 4), "--comment", f"c{i}")
    with reg.read() as tx:
        fb = rewards.feedback(tx, goal)
    assert [f["comment"] for f in fb] == ["c3", "c2", "c1"]
    assert set(fb[0]) == {"run_id", "score", "comment", "at"}
    contract = should_run(reg, "user", goal_id=goal, agent="a1", dry_run=True)["interaction_contract"]
    assert [f["comment"] for f in contract["agent_channel"]["feedback"]] == ["c3", "c2", "c1"]


def test_export_round_trips_and_validates(loopx, reg, goal):
    r1 = turn(reg, goal, outcome="ok", tokens=1200, cost=0.4, handoff="next: write the report",
              evidence=[("note", "fitted the forecast"), ("command", "exit 0: pytest")])
    r2 = turn(reg, goal, outcome="partial", tokens=10, cost=0.0)
    loopx("reward", "add", "--goal-id", goal, "--run-id", r1, "--score", "1", "--comment", "Prévision exacte ✓")
    loopx("reward", "add", "--goal-id", goal, "--run-id", r2, "--score", "-0.25")
    other = make_goal(loopx, title="Other")["goal"]
    r3 = turn(reg, other)
    loopx("reward", "add", "--goal-id", other, "--run-id", r3, "--score", "0")

    out = loopx("reward", "export", "--goal-id", goal)
    assert out.code == 0, out
    lines = out.out.splitlines()
    assert len(lines) == 2
    records = [json.loads(line) for line in lines]
    for rec in records:
        validate_record(rec)
    first = records[0]
    assert first["schema"] == "loopx.reward_record/1"
    assert first["reward"]["comment"] == "Prévision exacte ✓" and first["reward"]["score"] == 1.0
    assert first["goal"] == {"id": goal, "title": "Quarterly revenue", "objective": "Explain the spike.",
                             "criteria": ["A report exists"]}
    run = first["run"]
    assert (run["id"], run["outcome"], run["tokens"], run["cost"], run["handoff"]) == \
        (r1, "ok", 1200, 0.4, "next: write the report")
    assert run["wall_seconds"] >= 0 and run["status"] == "finished"
    assert first["contract"]["document"]["run_id"] == r1
    assert first["contract"]["document"]["schema"].startswith("loopx.interaction_contract/")
    assert [e["summary"] for e in first["evidence"]] == ["fitted the forecast", "exit 0: pytest"]
    assert first["evidence_total"] == 2
    assert records[1]["run"]["outcome"] == "partial" and records[1]["reward"]["comment"] is None

    everything = loopx("reward", "export").out.splitlines()
    assert len(everything) == 3
    for line in everything:
        validate_record(json.loads(line))
    # Each line is a round trip of one stored reward.
    stored = {w["id"]: w for w in loopx("reward", "list", "--goal-id", goal, "--json").json}
    for rec in records:
        assert {**rec["reward"], "goal_id": goal, "run_id": rec["run"]["id"]} == stored[rec["reward"]["id"]]


def test_schema_rejects_a_broken_record(loopx, reg, goal):
    import jsonschema

    run_id = turn(reg, goal)
    loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "1")
    rec = json.loads(loopx("reward", "export").out)
    validate_record(rec)
    for broken in ({**rec, "schema": "loopx.reward_record/2"},
                   {**rec, "reward": {**rec["reward"], "score": 2}},
                   {k: v for k, v in rec.items() if k != "run"}):
        with pytest.raises(jsonschema.ValidationError):
            validate_record(broken)


def test_export_of_nothing_and_of_an_unknown_goal(loopx, goal):
    r = loopx("reward", "export", "--goal-id", goal)
    assert r.code == 0 and r.out == ""
    r = loopx("reward", "export", "--goal-id", "g-000000000000", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "goal_not_found"


def test_handoff_show(loopx, reg, goal):
    r = loopx("handoff", "show", "--goal-id", goal, "--json")
    assert r.code == 0 and r.json["handoff"] is None
    assert "no hand-off" in loopx("handoff", "show", "--goal-id", goal).out
    turn(reg, goal, handoff="first note")
    run_id = turn(reg, goal, agent="a2", handoff="next: publish")
    turn(reg, goal, handoff=None)
    r = loopx("handoff", "show", "--goal-id", goal, "--json").json
    assert r["handoff"]["note"] == "next: publish" and r["handoff"]["run_id"] == run_id
    assert r["run"]["agent"] == "a2" and r["run"]["outcome"] == "ok"
    assert "next: publish" in loopx("handoff", "show", "--goal-id", goal).out


def test_summary_all_per_goal_and_across_goals(loopx, reg, goal):
    import jsonschema  # noqa: F401  (installed with the test extra)

    from loopx.views import quota

    quota.set_limits(reg, "user", goal_id=goal, values={"max_turns": 10, "max_tokens": 5000})
    r1 = turn(reg, goal, tokens=1000, cost=0.5, evidence=[("note", "a"), ("note", "b"), ("command", "c")])
    r2 = turn(reg, goal, outcome="failed", tokens=500, cost=0.25, handoff="next: retry with Q4 data")
    loopx("reward", "add", "--goal-id", goal, "--run-id", r1, "--score", "1", "--comment", "good")
    loopx("reward", "add", "--goal-id", goal, "--run-id", r2, "--score", "-0.5", "--comment", "wrong data")
    t = loopx("todo", "add", "--goal-id", goal, "--text", "Publish", "--json").json["id"]
    loopx("todo", "add", "--goal-id", goal, "--text", "Archive", "--depends-on", t)
    gate = loopx("gate", "add", "--goal-id", goal, "--title", "Publish?", "--blocks", f"todo:{t}", "--json").json
    rejected = loopx("gate", "add", "--goal-id", goal, "--title", "Email CFO?", "--json").json
    loopx("gate", "reject", "--goal-id", goal, "--gate-id", rejected["id"], "--comment", "not yet")
    other = make_goal(loopx, title="Other")["goal"]
    turn(reg, other, tokens=1, cost=0.0)

    r = loopx("summary_all", "--goal-id", goal, "--json")
    assert r.code == 0, r
    s = r.json
    assert s["schema"] == "loopx.views.summary_all/1" and len(s["goals"]) == 1
    g = s["goals"][0]
    assert g["goal"]["id"] == goal
    assert g["runs"]["total"] == 2 and g["runs"]["by_outcome"] == {"ok": 1, "partial": 0, "failed": 1, "interrupted": 0, "abandoned": 0}
    assert g["evidence"] == {"total": 3, "by_kind": {"command": 1, "note": 2}}
    assert g["rewards"]["count"] == 2 and g["rewards"]["mean"] == 0.25
    assert [f["comment"] for f in g["rewards"]["latest"]] == ["wrong data", "good"]
    assert g["quota"]["used"]["turns"] == 2 and g["quota"]["used"]["tokens"] == 1500
    assert g["quota"]["remaining"]["turns"] == 8 and g["quota"]["remaining"]["tokens"] == 3500
    assert g["quota"]["remaining"]["cost"] is None
    assert [x["id"] for x in g["gates"]["pending"]] == [gate["id"]]
    assert [x["comment"] for x in g["gates"]["rejected"]] == ["not yet"]
    assert g["todos"]["by_status"] == {"open": 2, "done": 0, "blocked": 0} and g["todos"]["ready"] == 0
    assert g["handoff"]["note"] == "next: retry with Q4 data" and g["handoff"]["run_id"] == r2

    both = loopx("summary_all", "--json").json
    assert [x["goal"]["id"] for x in both["goals"]] == [goal, other]
    t = both["totals"]
    assert t["goals"] == 2 and t["runs"]["total"] == 3 and t["runs"]["by_outcome"]["ok"] == 2
    assert t["rewards"] == {"count": 2, "mean": 0.25} and t["gates_pending"] == 1 and t["todos_open"] == 2

    text = loopx("summary_all").out
    assert "Quarterly revenue" in text and "Other" in text and "wrong data" in text
    assert "next: retry with Q4 data" in text and "All 2 goals" in text
    assert loopx("summary-all", "--goal-id", goal).code == 0


def test_summary_all_counts_abandoned_runs_among_the_outcomes(loopx, reg, goal, loopx_clock):
    from loopx.views.should_run import should_run

    turn(reg, goal)
    # A run whose agent never came back: open, then past its lease (scripted clock, no sleeping).
    should_run(reg, "user", goal_id=goal, agent="gone", ttl_seconds=60)
    loopx_clock.advance(120)
    g = loopx("summary-all", "--goal-id", goal, "--json").json["goals"][0]["runs"]
    assert g["by_outcome"] == {"ok": 1, "partial": 0, "failed": 0, "interrupted": 0, "abandoned": 1}
    assert sum(g["by_outcome"].values()) == g["total"] - g["by_status"]["open"] == 2
    # Marked abandoned by the next should-run: still counted once.
    should_run(reg, "user", goal_id=goal, agent="a2", dry_run=True)
    should_run(reg, "user", goal_id=goal, agent="a2")
    s = loopx("summary-all", "--json").json
    assert s["goals"][0]["runs"]["by_outcome"]["abandoned"] == 1 and s["totals"]["runs"]["by_outcome"]["abandoned"] == 1
    assert "abandoned 1" in loopx("summary-all", "--goal-id", goal).out.splitlines()[1].split("(")[0]
    r = loopx("summary_all", "--goal-id", "g-000000000000", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "goal_not_found"


def test_reward_replay_matches_state(loopx, reg, goal):
    from loopx.ledger import log as ledger

    run_id = turn(reg, goal)
    loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "0.3", "--comment", "ok")
    with reg.read() as tx:
        assert ledger.normalise(ledger.snapshot(tx, goal)) == \
            ledger.normalise(ledger.replayed_snapshot(ledger.events(tx, goal)))


def test_a_run_scored_while_open_exports_as_open(loopx, reg, goal):
    from loopx.views.should_run import should_run

    loopx("todo", "add", "--goal-id", goal, "--text", "x")
    run_id = should_run(reg, "user", goal_id=goal, agent="a1")["interaction_contract"]["run_id"]
    assert loopx("reward", "add", "--goal-id", goal, "--run-id", run_id, "--score", "0.1").code == 0
    rec = json.loads(loopx("reward", "export", "--goal-id", goal).out)
    validate_record(rec)
    assert rec["run"]["status"] == "open" and rec["run"]["outcome"] is None and rec["run"]["wall_seconds"] is None
    assert rec["evidence"] == [] and rec["evidence_total"] == 0

"""The status projection (loopx status): attention first, paging, one goal in full, on every backend."""

from __future__ import annotations


import pytest

from loopx.views import status
from loopx.ledger.registry import Registry
from tests.factories import make_goal


def _id(result):
    assert result.code == 0, result
    return result.json["id"]


def _open_run(loopx, goal_id, ttl=None):
    args = ["quota", "should-run", "--goal-id", goal_id, "--json"]
    if ttl is not None:
        args += ["--ttl-seconds", ttl]
    r = loopx(*args)
    assert r.code == 0, r
    assert r.json["decision"] == "run", r.json
    return r.json["interaction_contract"]["run_id"]


def _finish(loopx, run_id, outcome, **extra):
    args = ["run", "finish", "--run-id", run_id, "--outcome", outcome, "--json"]
    for k, v in extra.items():
        args += [f"--{k}", v]
    r = loopx(*args)
    assert r.code == 0, r
    return r.json


def test_empty_registry(loopx):
    r = loopx("status", "--json")
    assert r.code == 0, r
    view = r.json
    assert view["schema"] == "loopx.views.status/1"
    assert view["view"] == "overview"
    assert view["goals"] == [] and view["page"] == {"limit": 50, "next": None}
    assert view["counts"] == {"goals": {"open": 0, "paused": 0, "closed": 0}, "attention": 0}
    assert loopx("status").out.strip().endswith("no goals")


def test_attention_first_for_each_reason(loopx):
    quiet_old = make_goal(loopx, title="quiet old")["goal"]
    gated = make_goal(loopx, title="gated")["goal"]
    assert loopx("gate", "add", "--goal-id", gated, "--title", "Deploy?", "--scope", "production").code == 0
    broke = make_goal(loopx, title="out of budget")["goal"]
    assert loopx("quota", "set", "--goal-id", broke, "--max-turns", "1").code == 0
    _finish(loopx, _open_run(loopx, broke), "ok")
    failing = make_goal(loopx, title="failing")["goal"]
    _finish(loopx, _open_run(loopx, failing), "failed", handoff="it broke")
    quiet_new = make_goal(loopx, title="quiet new")["goal"]

    view = loopx("status", "--json").json
    ids = [g["id"] for g in view["goals"]]
    by_id = {g["id"]: g for g in view["goals"]}
    assert set(ids[:3]) == {gated, broke, failing}, ids
    assert ids[3:] == [quiet_new, quiet_old]
    assert by_id[gated]["attention"] == ["gate_pending"] and by_id[gated]["gates_pending"] == 1
    assert by_id[broke]["attention"] == ["budget_exhausted"]
    assert by_id[broke]["quota"]["exhausted"] == ["turns"]
    assert by_id[failing]["attention"] == ["run_failed"]
    assert by_id[failing]["last_run"]["outcome"] == "failed"
    assert by_id[quiet_new]["attention"] == [] and by_id[quiet_new]["last_run"] is None
    # The count is of goals that need a person (loopx.views.needs_you): one failed run is shown, but
    # agents retry it; the goal needs nobody until the same step keeps failing.
    assert view["counts"]["attention"] == 2
    assert [g["id"] for g in view["goals"] if g["needs_you"]] == [gated, broke]  # the oldest first

    # A later successful run settles a failing goal; granting budget settles an exhausted one.
    _finish(loopx, _open_run(loopx, failing), "ok")
    assert loopx("quota", "grant", "--goal-id", broke, "--turns", "1").code == 0
    view = loopx("status", "--json").json
    assert {g["id"] for g in view["goals"] if g["attention"]} == {gated}

    text = loopx("status").out
    assert text.index("gated") < text.index("quiet new") < text.index("quiet old")
    assert "attention: gate_pending" in text


def test_open_run_past_expiry_is_abandoned(loopx, reg, loopx_clock):
    goal_id = make_goal(loopx, title="agent vanished")["goal"]
    run_id = _open_run(loopx, goal_id, ttl=60)
    assert status.overview(reg)["goals"][0]["attention"] == []
    loopx_clock.advance(61)  # the run's lease runs out
    view = status.overview(reg)
    assert view["goals"][0]["attention"] == ["run_abandoned"]
    assert view["goals"][0]["last_run"]["id"] == run_id
    assert view["goals"][0]["last_run"]["state"] == "abandoned"
    assert status.goal_view(reg, goal_id)["attention"] == ["run_abandoned"]


def test_closed_goals_need_no_attention_and_hide_unless_all(loopx):
    goal_id = make_goal(loopx, title="done with")["goal"]
    assert loopx("gate", "add", "--goal-id", goal_id, "--title", "never decided").code == 0
    assert loopx("project_prompt", "close", "--goal-id", goal_id).code == 0
    view = loopx("status", "--json").json
    assert view["goals"] == [] and view["counts"]["goals"]["closed"] == 1
    shown = loopx("status", "--all", "--json").json["goals"]
    assert [g["id"] for g in shown] == [goal_id] and shown[0]["attention"] == []


def test_paging_walks_every_goal_once(loopx, reg):
    made = [make_goal(loopx, title=f"goal {i}")["goal"] for i in range(7)]
    for goal_id in (made[1], made[4]):
        assert loopx("gate", "add", "--goal-id", goal_id, "--title", "ok?").code == 0
    seen, cursor, pages = [], None, 0
    while True:
        args = ["status", "--limit", "2", "--json"] + (["--cursor", cursor] if cursor else [])
        view = loopx(*args).json
        pages += 1
        seen.extend(g["id"] for g in view["goals"])
        cursor = view["page"]["next"]
        if cursor is None:
            break
    assert pages == 4
    assert seen[:2] == [made[1], made[4]]  # attention first, the oldest first
    assert seen[2:] == [m for m in reversed(made) if m not in (made[1], made[4])]
    # Exactly a page of attention, and then the rest.
    first = status.overview(reg, limit=2)
    assert first["page"]["next"] == "r"
    assert [g["id"] for g in status.overview(reg, limit=5, cursor="r")["goals"]] == seen[2:]


def test_bad_arguments(loopx):
    r = loopx("status", "--cursor", "x.1", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    r = loopx("status", "--limit", "0", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    r = loopx("status", "--goal-id", "g-000000000000", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "goal_not_found"
    r = loopx("status", "--goal-id", "../etc", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def test_goal_view_in_full(loopx, reg):
    goal_id = make_goal(loopx, title="full picture")["goal"]
    assert loopx("quota", "set", "--goal-id", goal_id, "--max-turns", "5", "--max-tokens", "1000").code == 0
    first = _id(loopx("todo", "add", "--goal-id", goal_id, "--text", "first", "--priority", "P1", "--json"))
    second = _id(loopx("todo", "add", "--goal-id", goal_id, "--text", "second", "--depends-on", first, "--json"))
    third = _id(loopx("todo", "add", "--goal-id", goal_id, "--text", "third", "--json"))
    gate = _id(loopx("gate", "add", "--goal-id", goal_id, "--title", "hold third", "--blocks", f"todo:{third}",
                     "--json"))
    run_id = _open_run(loopx, goal_id)
    r = loopx("evidence", "add", "--run-id", run_id, "--kind", "command", "--summary", "make test: ok", "--json",
              env={"LOOPX_ACTOR": "executor"})
    assert r.code == 0, r
    _finish(loopx, run_id, "partial", tokens="250", cost="0.5", handoff="halfway; docs next")
    assert loopx("reward", "add", "--goal-id", goal_id, "--run-id", run_id, "--score", "0.5",
                 "--comment", "fine").code == 0

    view = status.goal_view(reg, goal_id)
    assert view["schema"] == "loopx.views.status/1" and view["view"] == "goal"
    assert view["goal"]["id"] == goal_id and view["goal"]["title"] == "full picture"
    assert view["attention"] == ["gate_pending"]
    assert [g["id"] for g in view["gates"]["pending"]] == [gate]
    assert view["todos"]["counts"] == {"open": 3, "done": 0, "blocked": 0}
    assert [t["id"] for t in view["todos"]["items"]] == [first, second, third]
    assert view["todos"]["ready"] == [first]  # second waits for first; third is behind its gate
    q = view["quota"]
    assert q["used"]["turns"] == 1 and q["used"]["tokens"] == 250
    assert q["remaining"]["turns"] == 4 and q["remaining"]["tokens"] == 750
    assert q["budget"]["turns"] == 5 and q["budget"]["cost"] is None and q["exhausted"] == []
    assert view["runs"]["total"] == 1 and view["runs"]["recent"][0]["outcome"] == "partial"
    assert view["evidence"]["recent"][0]["summary"] == "make test: ok"
    assert view["rewards"]["recent"][0]["score"] == 0.5 and view["rewards"]["mean"] == 0.5
    assert view["handoff"] == {"run_id": run_id, "note": "halfway; docs next",
                               "at": view["runs"]["recent"][0]["finished_at"]}
    kinds = [i["kind"] for i in view["timeline"]]
    assert kinds == ["reward", "run.finished", "evidence", "run.opened"]

    # The CLI prints the same projection, and a readable text form.
    assert loopx("status", "--goal-id", goal_id, "--json").json["todos"] == view["todos"]
    text = loopx("status", "--goal-id", goal_id).out
    assert "halfway; docs next" in text and "hold third" in text and "EXHAUSTED" not in text
    assert "turns        [####" in text

    # Approving the gate lets the third todo into the ready set.
    assert loopx("gate", "approve", "--goal-id", goal_id, "--gate-id", gate).code == 0
    after = status.goal_view(reg, goal_id)
    assert after["todos"]["ready"] == [first, third] and after["attention"] == []
    assert after["gates"]["decided"][0]["status"] == "approved"
    assert after["revision"] > view["revision"]


def test_batched_usage_matches_the_quota_module(loopx, reg):
    from loopx.domain import usage

    goals = [make_goal(loopx, title=f"g{i}")["goal"] for i in range(3)]
    _finish(loopx, _open_run(loopx, goals[0]), "ok", tokens="10", cost="0.25")
    _finish(loopx, _open_run(loopx, goals[0]), "failed", tokens="5")
    _open_run(loopx, goals[1])
    with reg.read() as tx:
        many = status.usage_many(tx, goals[1:])
        assert set(many) == set(goals[1:])
        many.update(status.usage_many(tx, goals[:1]))
        for goal_id in goals:
            assert many[goal_id] == usage.usage(tx, goal_id)
    # The overview's quota and the goal view's quota agree.
    summaries = {g["id"]: g for g in status.overview(reg)["goals"]}
    for goal_id in goals:
        assert summaries[goal_id]["quota"] == status.goal_view(reg, goal_id)["quota"]


def test_events_view(loopx, reg):
    goal_id = make_goal(loopx, title="ledger")["goal"]
    for i in range(3):
        assert loopx("todo", "add", "--goal-id", goal_id, "--text", f"t{i}").code == 0
    page = status.goal_events(reg, goal_id, after=0, limit=2)
    assert [e["seq"] for e in page["events"]] == [1, 2] and page["next_after"] == 2
    rest = status.goal_events(reg, goal_id, after=page["next_after"])
    assert [e["kind"] for e in rest["events"]] == ["todo.added", "todo.added"]
    assert status.goal_events(reg, goal_id, after=99)["events"] == []
    with pytest.raises(Exception) as err:
        status.goal_events(reg, "g-000000000000")
    assert err.value.code == "goal_not_found"


def test_status_reads_through_a_readonly_registry(loopx, registry_url):
    goal_id = make_goal(loopx, title="ro")["goal"]
    with Registry.open(registry_url, readonly=True) as ro:
        assert status.goal_view(ro, goal_id)["goal"]["id"] == goal_id
        assert status.overview(ro)["goals"][0]["id"] == goal_id


def test_a_claim_its_failed_run_left_behind_does_not_hide_that_the_goal_needs_you(loopx):
    # The claim's lease outlives its run; once the run failed it holds nothing (loopx.ledger.todo_ready.free_sql),
    # so the todo's gate is what stands in the way, and a person is asked for it.
    g = make_goal(loopx, title="held back", todo_texts=["the work"])
    goal, todo = g["goal"], g["todos"][0]
    run = _open_run(loopx, goal)
    assert loopx("todo", "claim", "--goal-id", goal, "--todo-id", todo, "--run-id", run).code == 0
    gate = _id(loopx("gate", "add", "--goal-id", goal, "--title", "Not this one yet", "--blocks", f"todo:{todo}",
                     "--json"))
    _finish(loopx, run, "failed")
    needs = loopx("status", "--json").json["goals"][0]["needs_you"]
    assert needs is not None and needs["decision"] == "ask_user", needs
    assert f"loopx gate approve --goal-id {goal} --gate-id {gate}" in needs["commands"], needs
    assert "NEEDS YOU" in loopx("status").out

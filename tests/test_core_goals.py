"""Goals through the CLI: the seed's project_prompt commands, history, formats, idempotency."""

import json


def create(loopx, title="Investigate Quarterly Revenue Spike", *extra):
    r = loopx("project_prompt", "create", "--title", title, "--description",
              "Analyze data, run models, and produce a report.", *extra, "--json")
    assert r.code == 0, r
    return r.json


def test_create_list_show_newest_first(loopx):
    first = create(loopx, "first", "--criterion", "report names the top three drivers")
    second = create(loopx, "second")
    assert first["id"].startswith("g-") and first["status"] == "open"
    assert first["criteria"] == [{"text": "report names the top three drivers", "met": False}]
    listed = loopx("project_prompt", "list", "--json").json
    assert [g["id"] for g in listed] == [second["id"], first["id"]]
    shown = loopx("project_prompt", "show", "--goal-id", first["id"], "--json").json
    assert shown == first


def test_format_before_and_after_subcommand(loopx):
    goal = create(loopx)
    before = loopx("--format", "json", "project_prompt", "show", "--goal-id", goal["id"])
    after = loopx("project_prompt", "show", "--goal-id", goal["id"], "--format", "json")
    assert before.json == after.json == goal
    text = loopx("project_prompt", "show", "--goal-id", goal["id"])
    assert text.code == 0 and goal["id"] in text.out and not text.out.startswith("{")


def test_lifecycle_and_list_filters(loopx):
    a, b, c = create(loopx, "a"), create(loopx, "b"), create(loopx, "c")
    assert loopx("project_prompt", "pause", "--goal-id", a["id"], "--reason", "waiting", "--json").json["status"] == "paused"
    assert loopx("project_prompt", "close", "--goal-id", b["id"], "--json").json["status"] == "closed"
    ids = lambda *args: [g["id"] for g in loopx("project_prompt", "list", "--json", *args).json]
    assert ids() == [c["id"], a["id"]]  # default: everything not closed
    assert ids("--status", "closed") == [b["id"]]
    assert ids("--status", "paused") == [a["id"]]
    assert ids("--status", "all") == [c["id"], b["id"], a["id"]]
    assert ids("--status", "all", "--limit", "1") == [c["id"]]
    resumed = loopx("project_prompt", "resume", "--goal-id", a["id"], "--json").json
    assert resumed["status"] == "open" and resumed["revision"] == 3


def test_history_records_every_change_with_actor(loopx):
    goal = create(loopx)
    loopx("project_prompt", "pause", "--goal-id", goal["id"], "--reason", "lunch")
    loopx("project_prompt", "resume", "--goal-id", goal["id"])
    events = loopx("history", "--goal-id", goal["id"], "--json").json
    assert [(e["seq"], e["kind"], e["actor"]) for e in events] == [
        (1, "goal.created", "user"), (2, "goal.paused", "user"), (3, "goal.resumed", "user")]
    assert events[1]["body"] == {"reason": "lunch"}
    assert loopx("history", "--goal-id", goal["id"], "--after", "2", "--json").json[0]["seq"] == 3


def test_operation_id_retry_returns_first_result_and_writes_nothing(loopx):
    first = loopx("project_prompt", "create", "--title", "once", "--operation-id", "op-1", "--json").json
    again = loopx("project_prompt", "create", "--title", "once", "--operation-id", "op-1", "--json").json
    assert again == first
    assert len(loopx("project_prompt", "list", "--status", "all", "--json").json) == 1
    conflict = loopx("project_prompt", "create", "--title", "other", "--operation-id", "op-1", "--json")
    assert conflict.code == 2 and conflict.json["error"]["code"] == "operation_conflict"
    paused = loopx("project_prompt", "pause", "--goal-id", first["id"], "--operation-id", "op-2", "--json")
    repeat = loopx("project_prompt", "pause", "--goal-id", first["id"], "--operation-id", "op-2", "--json")
    assert paused.code == repeat.code == 0 and repeat.json == paused.json
    assert len(loopx("history", "--goal-id", first["id"], "--json").json) == 2


def test_plugins_lists_builtins_and_their_hooks(loopx):
    found = loopx("plugins", "--json").json
    builtin = next(p for p in found if p["name"] == "loopx.builtin")
    assert builtin["builtin"] and "loopx_register_stores" in builtin["hooks"]


def test_python_dash_m_and_version(loopx_proc):
    r = loopx_proc("--version")
    assert r.code == 0 and "loopx" in r.out
    r = loopx_proc("project_prompt", "list", "--json")
    assert r.code == 0 and json.loads(r.out) == []


def test_user_marks_success_criteria(loopx):
    goal = create(loopx, "g", "--criterion", "one", "--criterion", "two")
    marked = loopx("project_prompt", "criterion", "--goal-id", goal["id"], "--number", "2", "--json")
    assert marked.code == 0, marked
    assert [c["met"] for c in marked.json["criteria"]] == [False, True]
    assert "[x] two" in loopx("project_prompt", "show", "--goal-id", goal["id"]).out
    back = loopx("project_prompt", "criterion", "--goal-id", goal["id"], "--number", "2", "--unmet", "--json")
    assert [c["met"] for c in back.json["criteria"]] == [False, False]
    bad = loopx("project_prompt", "criterion", "--goal-id", goal["id"], "--number", "3", "--json")
    assert bad.code == 2 and bad.json["error"]["code"] == "invalid_argument"
    agent = loopx("project_prompt", "criterion", "--goal-id", goal["id"], "--number", "1", "--json",
                  env={"LOOPX_ACTOR": "executor"})
    assert agent.code == 2 and agent.json["error"]["code"] == "actor_forbidden"
    assert len(loopx("history", "--goal-id", goal["id"], "--json").json) == 3

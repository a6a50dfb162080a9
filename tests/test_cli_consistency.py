"""The CLI keeps its word: ``--dry-run`` lists the steps a real call would give, a goal id
works positionally wherever a command takes a goal, contracts spell commands the one canonical
way, and the JSON nesting limit is the documented 64."""

from __future__ import annotations

from loopx.seam import capabilities as caps
from loopx import hookimpl
from loopx.seam.capabilities import Capability
from loopx.values.jsonsafe import MAX_DEPTH
from tests.factories import make_goal


class Contributes:
    """A plugin contributing one action to every run contract."""

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [{"argv": ["loopx", "evidence", "add", "--run-id", run_id, "--kind", "probe", "--summary", "seen"],
                 "action": "look", "note": "the probe looks"}]


def test_dry_run_lists_the_steps_a_real_call_gives_including_contributed_ones(loopx, loopx_plugin):
    loopx_plugin(Contributes(), name="probe-contrib")
    g = make_goal(loopx, title="consistent", todo_texts=("first",))["goal"]
    assert loopx("action", "add", g, "--name", "check", "--", "true").code == 0
    preview = loopx("quota", "should-run", g, "--dry-run", "--json").json
    assert preview["dry_run"] is True and preview["interaction_contract"]["run_id"] is None
    steps = preview["interaction_contract"]["cli_channel"]["steps"]
    assert [s["kind"] for s in steps] == ["claim", "do", "do", "record", "finish"]
    assert any("probe" in s["argv"] for s in steps)
    text = loopx("quota", "should-run", g, "--dry-run")
    assert "agent actions:" in text.out and "--action check" in text.out and "--kind probe" in text.out, text.out
    # It wrote nothing: no run was opened.
    assert loopx("run", "list", g, "--json").json == []
    real = loopx("quota", "should-run", g, "--json").json["interaction_contract"]
    run = real["run_id"]
    drew = [s["argv"] for s in steps]
    assert [[a.replace(preview_run(steps), run) for a in argv] for argv in drew] == \
        [s["argv"] for s in real["cli_channel"]["steps"]]


def preview_run(steps):
    argv = steps[-1]["argv"]
    return argv[argv.index("--run-id") + 1]


def test_a_goal_id_works_positionally_for_every_command_that_takes_one(loopx, loopx_plugin):
    import importlib

    for name in ("loopx_self_repair", "loopx_issue_fix"):  # the shipped plugins' commands too
        try:
            loopx_plugin(importlib.import_module(f"{name}.plugin"), name=name[6:])
        except ImportError:
            pass
    g = make_goal(loopx, title="consistent", todo_texts=("first",))["goal"]
    added = loopx("action", "add", g, "--name", "a", "--", "echo", g)
    assert added.code == 0, added
    assert loopx("action", "list", g, "--json").json[0]["argv"] == ["echo", g]
    assert loopx("action", "add", g[:8], "--name", "b", "--", "true").code == 0
    assert loopx("action", "add", "--name", "c", g, "--", "true").code == 0
    both = loopx("action", "add", "g-000000000000", "--goal-id", g, "--name", "d", "--", "true")
    assert both.code == 2 and "two goal ids" in both.err
    assert loopx("evidence", "add", g, "--kind", "note", "--summary", "by hand").code == 0
    listed = loopx("evidence", "list", g, "--json")
    assert listed.code == 0 and [e["summary"] for e in listed.json] == ["by hand"]
    # Every command with --goal-id also takes the goal as its first argument.
    from loopx.cli import cli
    from loopx.cli.ids import GOAL_ARG, GoalIdOption

    import click

    ctx = click.Context(cli)
    cli.list_commands(ctx)  # loads the plugins' commands
    missing = []
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        subs = [(f"{name} {s}", cmd.get_command(ctx, s)) for s in cmd.list_commands(ctx)] \
            if isinstance(cmd, click.Group) else [(name, cmd)]
        for path, sub in subs:
            takes_goal = any(isinstance(p, GoalIdOption) or p.name == "goal_id" for p in sub.params)
            positional = any(p.name == GOAL_ARG for p in sub.params) or path == "action add"
            if takes_goal and not positional:
                missing.append(path)
    assert missing == []


def test_contracts_spell_project_prompt_retry_hyphenated_and_the_seed_spelling_still_works(loopx):
    g = make_goal(loopx, title="stuck", todo_texts=("first",))["goal"]
    assert loopx("action", "add", g, "--name", "boom", "--", "false").code == 0
    assert loopx("quota", "set", g, "--stuck-after", "1").code == 0
    run = loopx("quota", "should-run", g, "--json").json["interaction_contract"]["run_id"]
    loopx("exec", "--run-id", run, "--action", "boom", env={"LOOPX_ACTOR": "executor"})
    loopx("run", "finish", "--run-id", run, env={"LOOPX_ACTOR": "executor"})
    stuck = loopx("quota", "should-run", g, "--json").json
    assert stuck["decision"] == "ask_user", stuck
    users = stuck["interaction_contract"]["user_channel"]["next_user_actions"]
    assert f"loopx project-prompt retry --goal-id {g}" in users
    assert not [u for u in users if "project_prompt" in u or "summary_all" in u]
    assert loopx("project_prompt", "retry", "--goal-id", g).code == 0  # the seed's spelling, an alias


def _nested(n):
    return "[" * n + "]" * n


def test_json_nests_exactly_as_deep_as_documented(loopx, reg, loopx_plugin):
    assert MAX_DEPTH == 64
    g = make_goal(loopx, title="consistent", todo_texts=("first",))["goal"]
    ok = loopx("evidence", "add", g, "--kind", "note", "--summary", "deep", "--data", _nested(64))
    assert ok.code == 0, ok
    too_deep = loopx("evidence", "add", g, "--kind", "note", "--summary", "deeper", "--data", _nested(65))
    assert too_deep.code == 2 and "64 levels" in too_deep.err

    class Declares:
        @hookimpl
        def loopx_register_capabilities(self, register):
            register(Capability(name="deep", version="1", summary="Deep state.", owns=["deep"]))

    loopx_plugin(Declares(), name="deep-cap")
    value = [0]
    for _ in range(63):
        value = [value]  # 64 levels
    caps.set_state(reg, "deep", g, {"v": value})
    assert caps.get_state(reg, g, "deep")["v"] == value

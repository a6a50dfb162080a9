"""A CLI that forgives: suggestions, one-line usage errors, positional and prefix ids,
hyphenated names with the seed's aliases, an example in every --help, and id completion.

What is checked is what a command answers (its output, its exit status) and what it changed,
so the commands run in this process, given a real process's environment (``loopx_here``,
``tests/cli_helpers.py``); shell completion too, through the ``_LOOPX_COMPLETE`` variable a
shell sets. ``test_usage_errors_are_one_line_without_a_usage_block`` keeps one real process:
the console entry point's own exit status.
"""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import loopx_in_process
from tests.conftest import loopx_env


def _goals_sharing_a_prefix(reg, n_min=2):
    """Create goals until two ids share their first hex digit; return (all ids, the shared prefix)."""
    from loopx.domain import goals

    ids: list[str] = []
    while True:
        ids.append(goals.create(reg, "user", title=f"goal {len(ids)}")["id"])
        by_first = {}
        for i in ids:
            by_first.setdefault(i[:3], []).append(i)
        shared = [p for p, members in by_first.items() if len(members) >= n_min]
        if shared:
            return ids, shared[0]


def _one_line_error(r, code):
    assert r.code == 2, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("loopx: error: ") and lines[0].endswith(f"[{code}]"), r.err
    return lines[0]


def test_mistyped_commands_get_a_suggestion_on_one_line(loopx_here):
    line = _one_line_error(loopx_here("qouta"), "invalid_argument")
    assert "No such command 'qouta'" in line and "Did you mean 'quota'?" in line
    line = _one_line_error(loopx_here("quota", "shuld-run", "g-000000000000"), "invalid_argument")
    assert "Did you mean 'should-run'?" in line
    line = _one_line_error(loopx_here("project_promt", "list"), "invalid_argument")
    assert "project-prompt" in line
    r = loopx_here("qouta", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    assert "Did you mean 'quota'?" in r.json["error"]["message"]


def test_usage_errors_are_one_line_without_a_usage_block(loopx_here, loopx_proc):
    for args in (["gate", "add", "--goal-id"], ["quota", "set", "g-000000000000", "--max-turns", "many"],
                 ["todo", "add", "--text", "no goal given"], ["project-prompt", "list", "--status", "nope"],
                 ["project-prompt", "show", "--goal-idd", "g-000000000000"]):
        r = loopx_here(*args)
        line = _one_line_error(r, "invalid_argument")
        assert "Usage:" not in r.err and not r.out, (args, r)
    # The console entry point's own process: the same one line and exit status 2.
    line = _one_line_error(loopx_proc("todo", "add", "--text", "x"), "invalid_argument")
    assert "missing the goal" in line and "--goal-id" in line


def test_goal_ids_positionally_and_by_unique_prefix(reg, loopx_here):
    ids, shared = _goals_sharing_a_prefix(reg)
    target = ids[0]
    # the shortest prefix naming only `target`
    short = next(target[:n] for n in range(3, 15) if sum(i.startswith(target[:n]) for i in ids) == 1)
    for args in (["project-prompt", "show", target], ["project-prompt", "show", short],
                 ["project-prompt", "show", short[2:]], ["project-prompt", "show", "--goal-id", short]):
        r = loopx_here(*args, "--json")
        assert r.code == 0 and r.json["id"] == target, (args, r)
    r = loopx_here("quota", "should-run", short, "--dry-run", "--json")
    assert r.code == 0 and r.json["goal_id"] == target, r
    # a positional id and a different --goal-id: refused
    other = next(i for i in ids if i != target)
    _one_line_error(loopx_here("project-prompt", "show", target, "--goal-id", other), "invalid_argument")


def test_an_ambiguous_prefix_lists_the_candidates_and_changes_nothing(reg, loopx_here):
    ids, shared = _goals_sharing_a_prefix(reg)
    candidates = sorted(i for i in ids if i.startswith(shared))
    r = loopx_here("project-prompt", "pause", shared)
    line = _one_line_error(r, "id_ambiguous")
    for c in candidates[:5]:
        assert c in line
    r = loopx_here("project-prompt", "pause", "--goal-id", shared, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "id_ambiguous"
    assert r.json["error"]["details"]["candidates"] == candidates[:5]
    listed = loopx_here("project-prompt", "list", "--status", "all", "--json").json
    assert {g["status"] for g in listed} == {"open"}, "an ambiguous id paused something"
    _one_line_error(loopx_here("project-prompt", "show", "g-fffffffffff"[: len(shared) + 0] + "z"), "invalid_argument")


def test_todo_gate_and_run_ids_take_prefixes(reg, loopx_here):
    from loopx.domain import goals

    g = goals.create(reg, "user", title="prefixes")["id"]
    t = loopx_here("todo", "add", g[:6], "--text", "one step", "--json").json["id"]
    x = loopx_here("gate", "add", g, "--title", "ship it", "--json").json["id"]
    r = loopx_here("gate", "approve", g[:5], "--gate-id", x[:7], "--json")
    assert r.code == 0 and r.json["id"] == x and r.json["status"] == "approved", r
    run = loopx_here("quota", "should-run", g, "--json").json["interaction_contract"]["run_id"]
    assert run
    r = loopx_here("todo", "claim", g, "--todo-id", t[:6], "--run-id", run[:6], "--json",
                   env={"LOOPX_ACTOR": "executor"})
    assert r.code == 0 and r.json["id"] == t, r
    r = loopx_here("run", "show", "--run-id", run[2:8], "--json")
    assert r.code == 0 and r.json["id"] == run, r


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_hyphenated_names_are_canonical_and_the_seed_spellings_still_work(loopx_here):
    top = loopx_here("--help").out
    assert "project-prompt" in top and "summary-all" in top
    assert "project_prompt" not in top.split("Commands:")[1] and "summary_all" not in top.split("Commands:")[1]
    made = loopx_here("project_prompt", "create", "--title", "seed spelling", "--json")
    assert made.code == 0, made
    a = loopx_here("project_prompt", "list", "--json").json
    b = loopx_here("project-prompt", "list", "--json").json
    assert a == b and a[0]["title"] == "seed spelling"
    s1 = loopx_here("summary_all", "--goal-id", a[0]["id"], "--json")
    s2 = loopx_here("summary-all", a[0]["id"], "--json")
    assert s1.code == s2.code == 0 and s1.json["goals"] == s2.json["goals"]


def _commands(env, path=()):
    """Every command path under ``path``, read from `--help` output (in-process: only output)."""
    out = loopx_in_process(*path, "--help", env=env).out
    if "Commands:" not in out:
        return [path]
    names = []
    for line in out.split("Commands:", 1)[1].split("\n\n")[0].splitlines():
        m = re.match(r"  (\S+)", line)
        if m:
            names.append(m.group(1))
    found = [path]
    for n in names:
        found += _commands(env, (*path, n))
    return found


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_every_help_has_an_example_and_goal_id_is_explained(registry_url):
    env = loopx_env(registry_url, LOOPX_PLUGINS="issue_fix,self_repair")  # the shipped capabilities too
    paths = _commands(env)
    assert ("quota", "should-run") in paths and ("registry", "info") in paths and len(paths) > 40
    assert ("self-repair", "fix") in paths and ("issue-fix", "start") in paths

    # In this process (what is checked is only the text): a process per command cost 30 s of CPU.
    helps = {path: loopx_in_process(*path, "--help", env=env).out for path in paths}
    missing = [" ".join(p) for p in paths if not re.search(r"\nExamples?:\n  loopx ", helps[p])]
    assert not missing, f"--help without an example: {missing}"
    # The core's own --goal-id options all say what they take (plugins' are their authors').
    core = [p for p in paths if not p or p[0] not in ("issue-fix", "self-repair")]
    bare = [" ".join(p) for p in core if re.search(r"--goal-id \S+(\s+\[required\])?\s*\n", helps[p])]
    assert not bare, f"--goal-id without help text: {bare}"


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_the_core_example_table_holds_only_core_commands(registry_url):
    # Plugins own their examples (click's epilog, docs/plugins.md): the core's table names no
    # command that the core alone does not have.
    from loopx.cli.examples import EXAMPLES

    core = {" ".join(p) for p in _commands(loopx_env(registry_url, LOOPX_PLUGINS=""))}
    assert set(EXAMPLES) - core == set()


def _complete(env, words: str) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    r = loopx_in_process(env={**env, "_LOOPX_COMPLETE": "bash_complete", "COMP_WORDS": words,
                              "COMP_CWORD": str(cword)})
    assert r.code == 0 and not r.err, r
    return [line.split(",", 1)[1] for line in r.out.splitlines() if line.startswith("plain,")]


def test_shell_completion_offers_goal_todo_and_gate_ids(reg, loopx_here):
    from loopx.domain import gates, goals, todos

    env = loopx_env(loopx_here.url)
    g1 = goals.create(reg, "user", title="one")["id"]
    g2 = goals.create(reg, "user", title="two")["id"]
    t1 = todos.add(reg, "user", goal_id=g1, text="a", depends_on=(), priority="P2")["id"]
    t2 = todos.add(reg, "user", goal_id=g2, text="b", depends_on=(), priority="P2")["id"]
    x1 = gates.add(reg, "user", goal_id=g1, title="ok?", scope="other", blocks="all")["id"]
    assert sorted(_complete(env, "loopx project-prompt show ")) == sorted([g1, g2])
    assert _complete(env, f"loopx project-prompt show {g2[:5]}") == [g2] or g1.startswith(g2[:5])
    assert sorted(_complete(env, "loopx quota should-run --goal-id ")) == sorted([g1, g2])
    # todos and gates of the goal already on the line
    assert _complete(env, f"loopx todo done {g1} --todo-id ") == [t1]
    assert _complete(env, f"loopx todo done --goal-id {g2} --todo-id ") == [t2]
    assert _complete(env, f"loopx gate approve {g1} --gate-id ") == [x1]

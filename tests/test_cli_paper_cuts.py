"""Paper cuts an operator met in a week (issue 37): a closed pipe, a misspelt actor, `action add`
blaming the wrong thing (`plugins install|uninstall`: tests/test_cli_plugins_registry.py; the
demo: tests/test_turn_demo.py). A closed pipe is a real ``loopx`` process's; what a command
answers (a refused actor, `action add`'s errors) and reading the registry back are checked in
this process, given a real process's environment (``tests/cli_helpers.py``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.backends import SqliteTemplate
from tests.cli_helpers import loopx_in_process
from tests.conftest import loopx_env

LONG = "x" * 900  # enough lines of this fill a pipe's buffer (64 KiB) many times


def _closed_early(argv, env, *, read_first_line: bool) -> subprocess.CompletedProcess:
    """Run ``loopx argv`` with stdout a real pipe whose reader goes away (as `| head -1` does):
    after one line, or before anything is read."""
    p = subprocess.Popen([sys.executable, "-m", "loopx", *argv], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline() if read_first_line else ""
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=120)
    return subprocess.CompletedProcess(argv, p.returncode, first, err)


def _fill_big_goal(reg) -> str:
    from loopx.domain import evidence, goals, todos

    g = goals.create(reg, "user", title="long")["id"]
    for i in range(120):
        todos.add(reg, "user", goal_id=g, text=f"{i} {LONG}")
        evidence.record(reg, "user", goal_id=g, kind="note", summary=f"{i} {LONG}")
    return g


@pytest.fixture(scope="module")
def big_goal_registry(tmp_path_factory):
    """The registry of :func:`big_goal`, filled once (240 writes, about 0.5 s of CPU) and copied."""
    return SqliteTemplate(tmp_path_factory.mktemp("big-goal"), fill=_fill_big_goal)


@pytest.fixture
def big_goal(sqlite_url, big_goal_registry):
    """A goal whose history and evidence are each far longer than a pipe's buffer (in a copy of
    one registry made for the module, at ``sqlite_url``)."""
    big_goal_registry.copy_to(sqlite_url)
    return big_goal_registry.filled


@pytest.mark.parametrize("argv", [["history", "{g}"], ["history", "{g}", "--format", "jsonl"],
                                  ["evidence", "list", "{g}", "--limit", "1000"],
                                  ["evidence", "list", "{g}", "--json", "--limit", "1000"]])
@pytest.mark.parametrize("read_first_line", [True, False])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_status_0(sqlite_url, big_goal, argv,
                                                                         read_first_line):
    env = loopx_env(sqlite_url)
    p = _closed_early([a.format(g=big_goal) for a in argv], env, read_first_line=read_first_line)
    assert (p.returncode, p.stderr) == (0, ""), p
    if read_first_line:
        assert p.stdout.strip()
    # The registry is as it was: still readable, nothing torn.
    again = loopx_in_process("history", big_goal, "--format", "jsonl", env=env)
    assert again.code == 0 and len(again.out.splitlines()) == 241


def test_a_short_answer_to_a_reader_gone_before_it_is_written_is_quiet_too(sqlite_url, big_goal):
    # A few bytes sit in the buffer until the process ends: the failure comes at the last flush.
    p = _closed_early(["status"], loopx_env(sqlite_url), read_first_line=False)
    assert (p.returncode, p.stderr) == (0, ""), p


def test_an_unknown_actor_is_refused_by_every_command_reads_too(sqlite_url, big_goal):
    for argv in (["status"], ["history", big_goal], ["project-prompt", "list"]):
        p = loopx_in_process(*argv, env=loopx_env(sqlite_url, LOOPX_ACTOR="usr"))
        assert p.code == 2 and p.out == "", p
        assert p.err.count("\n") == 1 and p.err.rstrip().endswith("[invalid_actor]"), p.err
        assert "'usr'" in p.err
    j = loopx_in_process("status", "--json", env=loopx_env(sqlite_url, LOOPX_ACTOR="usr"))
    assert j.code == 2 and '"invalid_actor"' in j.out
    # The two roles the environment may name still read.
    ok = loopx_in_process("status", env=loopx_env(sqlite_url, LOOPX_ACTOR="dashboard"))
    assert ok.code == 0, ok


def _action_add(url, *argv):
    return loopx_in_process("action", "add", *argv, env=loopx_env(url))


def test_action_add_names_the_real_culprit(sqlite_url):
    from loopx.domain import goals
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg:
        g = goals.create(reg, "user", title="t")["id"]
    cases = [((g, "--name", "bad name", "--", "echo", "hi"), "'bad name' must be"),
             ((g, "--name", "x"), "missing the command to allow"),
             (("--goal-id", g, "--name", "x"), "missing the command to allow"),
             ((g, "--name", "bad", "name", "--", "echo", "hi"), "more than one word before `--`")]
    for argv, says in cases:
        p = _action_add(sqlite_url, *argv)
        assert p.code == 2 and p.err.count("\n") == 1, (argv, p)
        assert says in p.err and "missing the goal" not in p.err, (argv, p.err)
        assert p.err.rstrip().endswith("[invalid_argument]")
    # Nothing was allowed; the right forms still work.
    assert _action_add(sqlite_url, g, "--name", "ok", "--", "echo", "hi").code == 0
    assert _action_add(sqlite_url, "--goal-id", g, "--name", "ok2", "echo", "hi").code == 0
    listed = loopx_in_process("action", "list", g, env=loopx_env(sqlite_url)).out
    assert [line.split()[0] for line in listed.splitlines()] == ["ok", "ok2"]
    assert _action_add(sqlite_url, "--help").code == 0

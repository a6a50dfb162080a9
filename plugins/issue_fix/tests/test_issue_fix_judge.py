"""The judge is not in the accused's hands, and a partial fix is not green.

A hostile "fix" reaches into pytest from the code under test - no conftest, its names split so
that no grep finds them - on real pytest projects in real git repositories, each made in the
goal's worktree as an agent with a shell there would: LoopX's judge (a pipe, raw outcomes, the
machinery's identity) makes each run ``issue_fix.runner_tampered``. And a fix that leaves the
bug's other failing tests failing is never verified until a user accepts them; the packet then
lists them first as still failing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from issue_fix_helpers import BUGGY, FAILING_ID, FIXED, git, make_project
from test_issue_fix import evidence, start, state, step

#: Every attack below leaves the bug (``a - b``) in place.
PATCH_CALLINFO = '''import importlib

_runner = importlib.import_module("_py" + "test." + "run" + "ner")
_klass = getattr(_runner, "Call" + "Info")
_real = _klass.__dict__["from" + "_call"].__func__


def _quiet(cls, func, when, reraise=None):
    def call():
        try:
            return func()
        except AssertionError:
            return None
    return _real(cls, call, when, reraise)


setattr(_klass, "from" + "_call", classmethod(_quiet))
'''
PATCH_REPORT = '''import importlib

_reports = importlib.import_module("_py" + "test." + "rep" + "orts")
_klass = getattr(_reports, "Test" + "Report")
_real = _klass.__dict__["from_item" + "_and_call"].__func__


def _passing(cls, item, call):
    report = _real(cls, item, call)
    if report.when == "call" and report.outcome == "failed":
        report.outcome, report.longrepr = "passed", None
    return report


setattr(_klass, "from_item" + "_and_call", classmethod(_passing))
'''
#: No function of pytest's is replaced: a plugin object registered from the fix's module (found
#: through the garbage collector) rewrites every report, as a conftest would.
REGISTER_PLUGIN = '''import gc
import importlib

_hookimpl = getattr(importlib.import_module("py" + "test"), "hook" + "impl")


class _Rewrite:
    @_hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome, report.longrepr = "passed", None


for _o in gc.get_objects():
    if type(_o).__name__ == "Pytest" + "PluginManager":
        _o.register(_Rewrite(), "calc-helper")
        break
'''
EXIT_EARLY = '''import os


def _leave():
    getattr(os, "_" + "exit")(0)
'''
#: The pipe a parent passed down is the inheritable one (pytest's own saved copies of stdout and
#: stderr are not: closing those would only crash the run).
CLOSE_PIPES = '''import os
import stat

for _fd in range(3, 256):
    try:
        if stat.S_ISFIFO(os.fstat(_fd).st_mode) and os.get_inheritable(_fd):
            os.close(_fd)
    except OSError:
        pass
'''
FORGE_LINES = '''import json
import os
import stat

for _fd in range(3, 256):
    try:
        if stat.S_ISFIFO(os.fstat(_fd).st_mode) and os.get_inheritable(_fd):
            os.write(_fd, (json.dumps(["test_calc.py::test_add", "passed", "passed", False]) + "\\n").encode())
    except OSError:
        pass
'''


def _attack(wt: Path, *parts: str, body: str = BUGGY) -> None:
    (wt / "calc.py").write_text("".join(p + "\n\n" for p in parts) + body)


def _reproduced(cli, repo, *extra):
    out = start(cli, repo, *extra)
    r, _ = step(cli, out["goal_id"])
    assert r.json["reproduced"] is True, r
    return out["goal_id"], Path(out["worktree"])


def _tampered(cli, loopx_registry, g, wt, *needles):
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.runner_tampered", r
    message = r.json["error"]["message"]
    for needle in needles:
        assert needle in message, (needle, message)
    s = state(cli, g)
    assert s["phase"] == "fix" and s["log"][-1]["outcome"] == "runner_tampered" and s.get("verification") is None
    assert git(wt, "rev-parse", "HEAD") == s["branch"]["base_commit"]  # nothing committed
    ev = [e for e in evidence(loopx_registry, g) if e["kind"] == "test"][-1]
    assert ev["data"]["outcome"] == "runner_tampered"
    assert json.loads(Path(ev["file_path"]).read_text())["tampered"], ev
    return message


@pytest.mark.slow
def test_a_fix_patching_callinfo_from_call_is_not_green(reproduced_goal):
    cli, loopx_registry, g, wt = reproduced_goal.cli, reproduced_goal.registry, reproduced_goal.goal_id, reproduced_goal.worktree
    _attack(wt, PATCH_CALLINFO)
    _tampered(cli, loopx_registry, g, wt, "CallInfo.from_call", "raised (or never ran) but were reported passed",
              "test_calc.py::test_add")
    # The real fix verifies; the packet tells the reviewer about the tampering attempt.
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r
    r, _ = step(cli, g, "--root-cause", "add subtracted")
    assert any("runner_tampered" in w for w in r.json["warnings"]), r.json["warnings"]
    assert "| verify | runner_tampered |" in r.json["packet"]


@pytest.mark.slow
def test_a_fix_patching_testreport_is_not_green(reproduced_goal):
    cli, loopx_registry, g, wt = reproduced_goal.cli, reproduced_goal.registry, reproduced_goal.goal_id, reproduced_goal.worktree
    _attack(wt, PATCH_REPORT)
    _tampered(cli, loopx_registry, g, wt, "TestReport.from_item_and_call", "test_calc.py::test_add")


@pytest.mark.slow
def test_a_fix_registering_a_report_rewriting_plugin_is_not_green(reproduced_goal):
    # No pytest function changes: only the raw outcome the judge saw tells the truth.
    cli, loopx_registry, g, wt = reproduced_goal.cli, reproduced_goal.registry, reproduced_goal.goal_id, reproduced_goal.worktree
    _attack(wt, REGISTER_PLUGIN)
    _tampered(cli, loopx_registry, g, wt, "raised (or never ran) but were reported passed", "test_calc.py::test_add")


@pytest.mark.slow
def test_a_fix_that_ends_the_run_with_os_exit_0_is_not_green(reproduced_goal):
    cli, loopx_registry, g, wt = reproduced_goal.cli, reproduced_goal.registry, reproduced_goal.goal_id, reproduced_goal.worktree
    # add() ends the test process with status 0 when the failing test calls it.
    _attack(wt, EXIT_EARLY, body=BUGGY.replace("    return a - b\n", "    _leave()\n    return a - b\n", 1))
    _tampered(cli, loopx_registry, g, wt, "exited 0 but pytest never finished")


@pytest.mark.slow
def test_a_fix_closing_the_judges_pipe_is_not_green(reproduced_goal):
    cli, loopx_registry, g, wt = reproduced_goal.cli, reproduced_goal.registry, reproduced_goal.goal_id, reproduced_goal.worktree
    _attack(wt, CLOSE_PIPES, PATCH_CALLINFO)
    _tampered(cli, loopx_registry, g, wt, "pytest never finished in the judge's record")


@pytest.mark.slow
def test_a_fix_writing_into_the_judges_pipe_is_not_green(reproduced_goal):
    cli, loopx_registry, g, wt = reproduced_goal.cli, reproduced_goal.registry, reproduced_goal.goal_id, reproduced_goal.worktree
    _attack(wt, FORGE_LINES, PATCH_CALLINFO)
    _tampered(cli, loopx_registry, g, wt, "recorded twice, or forged")


@pytest.mark.slow
def test_a_mixed_suite_verifies_green_without_a_false_alarm(cli, tmp_path):
    test = ('import unittest\n\nimport pytest\n\nfrom calc import add\n\n\n'
            'def test_add():\n    assert add(2, 3) == 5\n\n\n'
            '@pytest.mark.xfail\ndef test_known_bug():\n    assert add(1, 1) == 3\n\n\n'
            '@pytest.mark.xfail\ndef test_xpass():\n    assert add(0, 0) == 0\n\n\n'
            '@pytest.mark.skip(reason="later")\ndef test_later():\n    pass\n\n\n'
            '@pytest.mark.parametrize("a", [1, 2, 3])\ndef test_zero(a):\n    assert add(a, 0) == a\n\n\n'
            'class TestOld(unittest.TestCase):\n    def test_old(self):\n        self.assertEqual(add(0, 4), 4)\n\n'
            '    @unittest.skip("no")\n    def test_skipped(self):\n        pass\n\n'
            '    @unittest.expectedFailure\n    def test_expected(self):\n        self.assertEqual(1, 2)\n')
    repo = make_project(tmp_path, test=test)
    out = start(cli, repo, "--test-id", "test_calc.py::test_add", "--test-id", "test_calc.py::TestOld::test_old")
    g, wt = out["goal_id"], Path(out["worktree"])
    r, _ = step(cli, g)
    assert r.json["reproduced"] is True, r
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True and r.json["exit_status"] == 0, r


PARTIAL_TESTS = ('from calc import add\n\n\n'
                 'def test_add_issue_42():\n    assert add(2, 3) == 5\n\n\n'
                 'def test_add_zero():\n    assert add(0, 0) == 0\n\n\n'
                 + "".join(f'def test_add_negative_{n}():\n    assert add(-{n}, -1) == -{n + 1}\n\n\n'
                           for n in range(1, 5)))
#: Fixes the new test's case (positive numbers) and leaves negative ones subtracting.
PARTIAL_FIX = "def add(a, b):\n    return a + b if a >= 0 else a - b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.mark.slow
def test_a_partial_fix_with_test_id_is_still_failing_until_a_user_accepts(cli, tmp_path, loopx_registry):
    repo = make_project(tmp_path, test=PARTIAL_TESTS)
    out = start(cli, repo, "--test-id", "test_calc.py::test_add_issue_42")
    g, wt = out["goal_id"], Path(out["worktree"])
    r, _ = step(cli, g)
    assert r.json["failing"] == ["test_calc.py::test_add_issue_42"], r
    negatives = [f"test_calc.py::test_add_negative_{n}" for n in range(1, 5)]
    (wt / "calc.py").write_text(PARTIAL_FIX)
    # pytest exits 1: never verified. The four are named, first, as still failing.
    r, _ = step(cli, g, expect=1)
    assert r.json["verified"] is False and r.json["reason"] == "still_failing", r
    assert r.json["still_failing"] == negatives and r.json["exit_status"] == 1
    assert r.json["problem"].startswith("still failing: 4 test(s)")
    assert git(wt, "rev-parse", "HEAD") == state(cli, g)["branch"]["base_commit"]
    # Asked again, the same: the gate is the user's, and an executor's verify does not pass it.
    gate = state(cli, g)["accept_failing_gate"]
    assert gate["tests"] == negatives
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "still_failing" and state(cli, g)["accept_failing_gate"] == gate
    # The user accepts exactly those four: verify leaves them out, pytest exits 0, green.
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate["gate_id"]).code == 0
    r, _ = step(cli, g)
    assert r.json["verified"] is True and r.json["exit_status"] == 0 and r.json["accepted_failing"] == negatives, r
    r, _ = step(cli, g, "--root-cause", "add subtracted")
    packet = r.json["packet"]
    first = packet.index("## Still failing")
    assert first < packet.index("WARNING") < packet.index("## Failing tests")
    for test_id in negatives:
        assert f"- **still failing**: `{test_id}`" in packet
    assert "user" in packet[first:packet.index("WARNING")]
    assert any("still failing" in w for w in r.json["warnings"]), r.json["warnings"]
    assert "Still failing: 4 test(s)" in packet


@pytest.mark.slow
def test_a_fix_that_breaks_a_new_test_after_acceptance_asks_again(cli, tmp_path):
    repo = make_project(tmp_path, test=PARTIAL_TESTS)
    out = start(cli, repo, "--test-id", "test_calc.py::test_add_issue_42")
    g, wt = out["goal_id"], Path(out["worktree"])
    step(cli, g)
    (wt / "calc.py").write_text(PARTIAL_FIX)
    step(cli, g, expect=1)
    gate = state(cli, g)["accept_failing_gate"]
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate["gate_id"]).code == 0
    # Accepted tests that fail are left out; a test that passed at the base and fails now is a
    # regression, never accepted this way.
    (wt / "calc.py").write_text(PARTIAL_FIX.replace("a >= 0 else a - b", "a > 0 else a - b - 1"))
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "regression" and r.json["regressions"] == ["test_calc.py::test_add_zero"], r


@pytest.mark.slow
def test_a_pytest_configuration_above_the_copy_moves_no_test_id(cli, tmp_path, monkeypatch):
    """pytest makes test ids relative to the directory of the configuration it finds, looking up
    from the tests: one above LoopX's private copies (a ``pyproject.toml`` in ``$HOME``, say) gave
    every id the name of that run's own directory, so no two runs agreed and nothing could be
    verified. The ids are the copy's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the private copies: below tmp_path
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    g = start(cli, make_project(tmp_path))["goal_id"]
    r, _ = step(cli, g)
    assert r.json["reproduced"] is True, r
    assert state(cli, g)["reproduction"]["failing"] == [FAILING_ID]
    (Path(state(cli, g)["worktree"]) / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r

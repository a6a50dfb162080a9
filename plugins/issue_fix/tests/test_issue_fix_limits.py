"""Issue-Fix time limits, a real library's own suite, and the plugin switched off.

The time-out tests use a test that leaves a background child holding the output pipe: the
step must come back at its limit and leave nothing running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from loopx.testing import wait_until

from issue_fix_helpers import LIB_CHUNKS, PY, TEST_COMMAND, as_agent, git, make_library, make_project, origin_of
from test_issue_fix import contract, only, start, state, step


def _running(marker: str) -> list[int]:
    """PIDs of live processes whose command line holds ``marker``."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                st = (d / "stat").read_text().split()[2]
            except OSError:
                continue
            if marker.encode() in cmd and st != "Z":
                found.append(int(d.name))
    return found


def _ended(*markers: str) -> None:
    """Wait (10 s at most) until no live process holds any of ``markers`` (killed ones take a moment)."""
    wait_until(lambda: not any(_running(m) for m in markers), f"processes marked {markers} to end", timeout=10)


def _child_test(marker: str, *, hang: bool) -> str:
    """A pytest test that starts a background child (holding stdout) and then hangs or fails."""
    tail = "    time.sleep(300)\n" if hang else "    assert False, 'fails at once'\n"
    return ("import subprocess, sys, time\n\n\ndef test_leaves_a_child():\n"
            f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}])\n" + tail)


@pytest.mark.slow
def test_a_time_out_with_a_background_child_returns_at_the_limit_and_leaves_nothing(cli, tmp_path, loopx_registry):
    marker = f"loopx-child-{uuid.uuid4().hex}"
    repo = make_project(tmp_path, test=_child_test(marker, hang=True))
    # -s: the child writes to the step's own output pipe, and keeps it open.
    g = start(cli, repo, command=f"{TEST_COMMAND} -s")["goal_id"]
    began = time.monotonic()
    r, _ = step(cli, g, "--timeout", "3", expect=2)
    took = time.monotonic() - began
    assert r.json["error"]["code"] == "issue_fix.not_a_test_failure", r
    assert "timed out after 3s" in r.json["error"]["message"]
    assert took < 60, took  # the 3 s limit, never the 300 s child
    _ended(marker)
    s = state(cli, g)
    assert s["phase"] == "reproduce" and s["log"][-1]["outcome"] == "not_a_test_failure"
    with loopx_registry.read() as tx:
        [row] = tx.query("SELECT data FROM evidence WHERE goal_id = ? AND kind = 'test'", (g,))
    data = json.loads(row["data"])
    assert data["timed_out"] is True and data["timeout_seconds"] == 3 and data["timeout_source"] == "--timeout"


@pytest.mark.slow
def test_a_background_child_of_a_finished_test_run_is_ended(cli, tmp_path):
    marker = f"loopx-child-{uuid.uuid4().hex}"
    repo = make_project(tmp_path, test=_child_test(marker, hang=False))
    g = start(cli, repo, command=f"{TEST_COMMAND} -s")["goal_id"]
    began = time.monotonic()
    r, _ = step(cli, g)
    assert r.json["reproduced"] is True and r.json["failing"] == ["test_calc.py::test_leaves_a_child"]
    assert time.monotonic() - began < 60  # never the 300 s child
    _ended(marker)


@pytest.mark.slow
def test_children_that_made_a_session_of_their_own_are_ended_too(cli, tmp_path):
    # Unique durations mark the processes: a daemon made the classic way (a subshell that exits,
    # so nothing links it to the test run any more) and a plain `setsid sleep &`.
    orphan, child = (f"{n}.{uuid.uuid4().int % 10**9:09d}" for n in (301, 302))
    daemons = f"(setsid sleep {orphan} &); setsid sleep {child} & "
    repo = make_project(tmp_path)
    # At the time-out.
    g = start(cli, repo, command=f": {{report}}; {daemons}sleep 300")["goal_id"]
    began = time.monotonic()
    r, _ = step(cli, g, "--timeout", "2", expect=2)
    assert "timed out after 2s" in r.json["error"]["message"] and time.monotonic() - began < 60
    _ended(orphan, child)
    # When the tests end by themselves.
    g = start(cli, make_project(tmp_path / "b"), command=f"{daemons}{TEST_COMMAND}")["goal_id"]
    began = time.monotonic()
    r, _ = step(cli, g)
    assert r.json["reproduced"] is True and time.monotonic() - began < 60
    _ended(orphan, child)


@pytest.mark.slow
def test_every_contract_step_carries_its_time_limit_from_quota_need_and_wall_budget(cli, project):
    out = start(cli, project, "--test-timeout", "300")
    g = out["goal_id"]
    doc = contract(cli, g)
    assert only(doc, "issue-fix").endswith("--timeout 300")
    assert any("time limit 300s" in n for n in doc["interaction_contract"]["agent_channel"]["notes"])
    assert as_agent(cli, only(doc, "loopx run finish")).code == 0
    # A wall budget smaller than the need cuts the limit.
    assert cli("quota", "set", "--goal-id", g, "--max-wall-seconds", "120").code == 0
    doc = contract(cli, g)
    command = only(doc, "issue-fix")
    limit = int(command.rsplit(" ", 1)[1])
    assert 110 <= limit <= 120, command  # 120 s less the first run's few
    assert any("remaining wall budget" in n for n in doc["interaction_contract"]["agent_channel"]["notes"])
    r = as_agent(cli, command + " --json")
    assert r.code == 0 and r.json["test"]["timeout_seconds"] == limit


@pytest.mark.slow
def test_a_real_library_with_a_seeded_off_by_one(cli, tmp_path, loopx_registry):
    repo = make_library(tmp_path)
    out = start(cli, repo, "--test-id", "tests/test_chunks.py::test_windows",
                text="windows() drops the last window", command=f"{PY} -m pytest -q")
    g, wt = out["goal_id"], Path(out["worktree"])
    r, _ = step(cli, g)
    # Only the named test is the reproduction, though another fails too.
    assert r.json["failing"] == ["tests/test_chunks.py::test_windows"]
    assert r.json["test"]["cases"]["tests/test_chunks.py::test_windows_whole"]["status"] == "failed"
    assert r.json["test"]["cases"]["tests/test_pages.py::TestPages::test_last_page"]["status"] == "passed"
    assert r.json["test_files"] == ["tests/test_chunks.py"]
    # A "fix" that mends windows() and breaks chunks(): a regression, not verified.
    broken = LIB_CHUNKS.replace("range(0, len(seq), size)", "range(0, len(seq) - 1, size)")
    (wt / "chunkit" / "chunks.py").write_text(broken)
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "regression"
    assert "tests/test_pages.py::TestPages::test_last_page" in r.json["regressions"]
    assert "tests/test_chunks.py::test_chunks_ragged" in r.json["regressions"]
    # The real fix.
    (wt / "chunkit" / "chunks.py").write_text(LIB_CHUNKS)
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    commit = r.json["commit"]
    assert r.json["diff"]["files"] == [{"path": "chunkit/chunks.py", "insertions": 1, "deletions": 1}]
    r, _ = step(cli, g, "--root-cause", "range() stopped one window short")
    packet = r.json["packet"]
    assert "| `tests/test_chunks.py::test_windows` | failed | passed |" in packet
    assert "-    return [seq[i:i + size] for i in range(len(seq) - size)]" in packet
    assert "| 2 | verify | regression |" in packet
    s = state(cli, g)
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    r, _ = step(cli, g)
    assert git(origin_of(repo), "rev-parse", f"refs/heads/{out['branch']}") == commit
    assert git(origin_of(repo), "show", f"{commit}:chunkit/chunks.py") + "\n" == LIB_CHUNKS
    assert state(cli, g)["status"] == "closed"


@pytest.mark.slow
def test_publish_is_refused_before_the_handoff_and_before_approval(cli, project):
    out = start(cli, project)
    g, wt = out["goal_id"], Path(out["worktree"])
    run = contract(cli, g)["interaction_contract"]["run_id"]
    r = as_agent(cli, f"loopx issue-fix publish --run-id {run} --json")
    assert r.code == 2 and r.json["error"]["code"] == "issue_fix.not_reproduced"
    # The turn's step did not run: its outcome is what the evidence supports (failed).
    assert as_agent(cli, f"loopx run finish --run-id {run}").code == 0
    step(cli, g)
    (wt / "calc.py").write_text((wt / "calc.py").read_text().replace("return a - b", "return a + b", 1))
    step(cli, g)
    r, doc = step(cli, g)
    # Waiting for the user: no run is opened, so no publish can run; an old run is refused.
    assert contract(cli, g)["decision"] == "ask_user"
    r = as_agent(cli, f"loopx issue-fix publish --run-id {doc['interaction_contract']['run_id']} --json")
    assert r.code == 2 and r.json["error"]["code"] == "run_not_open", r
    # Rejected: back to fix, so the next contract offers verify, never publish; nothing was pushed.
    gate = state(cli, g)["publish_gate"]
    assert cli("gate", "reject", "--goal-id", g, "--gate-id", gate, "--comment", "not yet").code == 0
    doc = contract(cli, g)
    assert doc["decision"] == "run" and only(doc, "loopx issue-fix ").startswith("loopx issue-fix verify ")
    assert git(origin_of(project), "branch", "--list") == ""


@pytest.mark.slow
def test_disabling_the_plugin_removes_its_commands_not_the_core(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_REGISTRY"] = str(tmp_path / "reg.db")
    repo = make_project(tmp_path)

    def loopx(*args, **extra):
        return subprocess.run([sys.executable, "-m", "loopx", *map(str, args)], capture_output=True, text=True,
                              env={**env, **extra}, timeout=120)

    p = loopx("issue-fix", "start", "--repo", repo, "--title", "t", "--issue-text", "x",
              "--test-command", TEST_COMMAND, "--json")
    assert p.returncode == 0, p.stderr
    g = json.loads(p.stdout)["goal_id"]
    off = {"LOOPX_DISABLE_PLUGINS": "issue_fix"}
    p = loopx("issue-fix", "show", "--goal-id", g, **off)
    assert p.returncode == 2 and "No such command 'issue-fix'" in p.stderr
    assert "issue_fix" not in loopx("capabilities", "list", **off).stdout
    p = loopx("quota", "should-run", "--goal-id", g, "--json", **off)
    assert p.returncode == 0, p.stderr
    assert not any("issue-fix" in a for a in json.loads(p.stdout)["interaction_contract"]["cli_channel"]["next_cli_actions"])
    p = loopx("issue-fix", "show", "--goal-id", g, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["phase"] == "reproduce"


def test_killing_loopx_mid_test_leaves_nothing_running(cli, tmp_path):
    marker = f"loopx-child-{uuid.uuid4().hex}"
    repo = make_project(tmp_path, test=_child_test(marker, hang=True))
    g = start(cli, repo, command=f"{TEST_COMMAND} -s")["goal_id"]
    run = contract(cli, g)["interaction_contract"]["run_id"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=cli.url, LOOPX_ACTOR="executor")
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "issue-fix", "reproduce", "--run-id", run],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _running(marker), "the test's child to start", timeout=30, interval=0.1)
    proc.kill()
    proc.wait()
    _ended(marker)


RUNNER = '''"""A project's own test runner: unittest, with a JUnit XML report written to build/junit.xml."""
import os
import sys
import unittest
from xml.sax.saxutils import quoteattr


class Result(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.append((test, "", ""))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes.append((test, "failure", str(err[1])))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append((test, "error", str(err[1])))


suite = unittest.defaultTestLoader.discover(".", pattern="check_*.py")
result = unittest.TextTestRunner(resultclass=Result, verbosity=2).run(suite)
os.makedirs("build", exist_ok=True)
with open("build/junit.xml", "w") as fh:
    fh.write("<testsuite>")
    for test, kind, message in result.outcomes:
        cls, name = test.id().rsplit(".", 1)
        body = f"<{kind} message={quoteattr(message)}/>" if kind else ""
        fh.write(f"<testcase classname={quoteattr(cls)} name={quoteattr(name)}>{body}</testcase>")
    fh.write("</testsuite>")
sys.exit(0 if result.wasSuccessful() else 1)
'''


def test_another_runner_names_its_report_and_an_exception_in_a_test_is_red(cli, tmp_path):
    check = ("import unittest\n\nfrom calc import add, sub\n\n\nclass CalcTest(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
             "    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n\n"
             "    def test_crash(self):\n        self.assertEqual(add('a', 1), 'a1')\n")
    repo = make_project(tmp_path, test="")
    (repo / "check_calc.py").write_text(check)
    (repo / "run_tests.py").write_text(RUNNER)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "own runner")
    out = start(cli, repo, "--report", "build/junit.xml", command=f"{PY} run_tests.py")
    g, wt = out["goal_id"], Path(out["worktree"])
    r, _ = step(cli, g)
    # add("a", 1) raises TypeError: for unittest an <error>, a test failing all the same.
    assert r.json["failing"] == ["check_calc.CalcTest::test_add", "check_calc.CalcTest::test_crash"]
    assert r.json["test_files"] == ["check_calc.py"]
    assert not (wt / "build" / "junit.xml").exists()
    (wt / "calc.py").write_text("def add(a, b):\n    return a + b if type(a) is type(b) else f'{a}{b}'\n\n\n"
                                "def sub(a, b):\n    return a - b\n")
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    assert r.json["diff"]["files"][0]["path"] == "calc.py" and len(r.json["diff"]["files"]) == 1


def test_another_runner_failing_to_import_a_module_is_not_red(cli, tmp_path):
    repo = make_project(tmp_path, test="")
    (repo / "check_calc.py").write_text("import no_such_module\n")
    (repo / "run_tests.py").write_text(RUNNER)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "own runner")
    g = start(cli, repo, "--report", "build/junit.xml", command=f"{PY} run_tests.py")["goal_id"]
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.not_a_test_failure" and "collection error" in r.json["error"]["message"]


def test_the_evidence_summary_keeps_failing_cases_first_within_its_byte_budget():
    """A big run's evidence holds a bounded summary (the complete results are in the results
    file): failing cases first, then passing ones while the budget of JSON bytes lasts. Ids with
    quotes, backslashes, control and non-ASCII characters count as JSON writes them."""
    from loopx_issue_fix.testrun import slim

    odd = ['t"q', "t\\b", "t\nn", "tü", "t\x7f", "t\u4e2d", "t\x01"]
    cases = {f"tests/test_m.py::test_{n}{odd[n % len(odd)]}": {"status": "passed", "message": None}
             for n in range(3000)}
    cases |= {f"tests/test_f.py::test_red_{n}": {"status": "failed", "message": f'assert {n} == "x\\y"'}
              for n in range(5)}
    test = {"command": "pytest", "exit_code": 1, "report": {"found": True, "cases": cases}}
    out = slim(test, budget=20_000)
    kept = list(out["cases"])
    assert kept[:5] == [f"tests/test_f.py::test_red_{n}" for n in range(5)]
    assert out["cases"][kept[0]] == {"status": "failed", "message": 'assert 0 == "x\\y"'}
    assert out["cases_total"] == 3005 and out["cases_truncated"] is True and "report" not in out
    size = sum(len(json.dumps([i, e])) for i, e in out["cases"].items())
    following = next(i for i in cases if i not in out["cases"])
    assert size <= 20_000 < size + len(json.dumps([following, {"status": "passed"}]))

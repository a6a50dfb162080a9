"""A hostile agent against Issue-Fix's verify: every way the issue measured, on real pytest projects
in real git repositories. Each attack is made in the goal's worktree the way an agent with a
shell there would, and each fails verify with its code (or, when the trick only hid files,
verify ran without them and the real tests still fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from issue_fix_helpers import BUGGY, FIXED, PY, TEST, TEST_COMMAND, WRONG, git, make_project, origin_of
from issue_fix_helpers import as_agent
from test_issue_fix import contract, evidence, only, start, state, step, to_publish

pytestmark = pytest.mark.slow  # real confined turns, seconds each: not in the quick tier

REWRITE_REPORTS = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
'''
MONKEYPATCH = '''import calc


def _add(a, b):
    return a + b


calc.add = _add
'''


def reproduced(cli, repo, *extra, command=TEST_COMMAND):
    out = start(cli, repo, *extra, command=command)
    r, _ = step(cli, out["goal_id"])
    assert r.json["reproduced"] is True, r
    return out["goal_id"], Path(out["worktree"])


def refused(cli, g, code):
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == code, r
    return r.json["error"]["message"]


def test_a_conftest_that_rewrites_reports_is_a_test_change(reproduced_goal):
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    (wt / "conftest.py").write_text(REWRITE_REPORTS)
    message = refused(cli, g, "issue_fix.tests_changed")
    assert "conftest.py" in message
    s = state(cli, g)
    assert s["phase"] == "fix" and s["log"][-1]["outcome"] == "tests_changed"
    assert git(wt, "rev-parse", "HEAD") == s["branch"]["base_commit"]


def test_editing_the_base_conftest_to_monkeypatch_is_a_test_change(cli, tmp_path):
    repo = make_project(tmp_path)
    (repo / "conftest.py").write_text("# shared fixtures\n")
    git(repo, "add", "conftest.py")
    git(repo, "commit", "-qm", "conftest")
    g, wt = reproduced(cli, repo)
    (wt / "conftest.py").write_text(MONKEYPATCH)
    assert "conftest.py" in refused(cli, g, "issue_fix.tests_changed")
    # Restored, with the real fix: verified.
    (wt / "conftest.py").write_text("# shared fixtures\n")
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True


def test_a_data_file_the_tests_read_is_guarded_by_the_audit_record(cli, tmp_path, loopx_registry):
    test = ("import json\nimport pathlib\n\nfrom calc import add\n\n"
            "CASES = json.loads((pathlib.Path(__file__).parent / 'data' / 'expected.json').read_text())\n\n\n"
            "def test_add():\n    assert add(2, 3) == CASES['add']\n\n\n"
            "def test_sub():\n    assert 5 - 3 == CASES['sub']\n")
    repo = make_project(tmp_path, test=test)
    (repo / "data").mkdir()
    (repo / "data" / "expected.json").write_text('{"add": 5, "sub": 2}\n')
    git(repo, "add", "data")
    git(repo, "commit", "-qm", "data")
    g, wt = reproduced(cli, repo)
    s = state(cli, g)
    assert "data/expected.json" in s["reproduction"]["data_files"]
    # The expected value is edited to what the buggy code returns.
    (wt / "data" / "expected.json").write_text('{"add": -1, "sub": 2}\n')
    assert "data/expected.json" in refused(cli, g, "issue_fix.tests_changed")


def _hidden_conftest(reproduced_goal, hide):
    """The agent drops a report-rewriting conftest and hides it from git with ``hide(wt, goal_dir)``."""
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    (wt / "conftest.py").write_text(REWRITE_REPORTS)
    hide(wt, Path(state(cli, g)["goal_dir"]))
    excludes = f"core.excludesFile={wt.parent / 'exclude'}"
    assert "conftest.py" not in git(wt, "-c", excludes, "status", "--porcelain")
    # In the agent's worktree the hook makes everything pass...
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=wt,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout
    # ...but verify runs a clean copy of the code, without it: still red.
    r, _ = step(cli, g, expect=1)
    assert r.json["verified"] is False and r.json["reason"] == "test_failed", r
    assert "conftest.py" in r.json["ignored"]
    return g


def test_a_conftest_hidden_by_gitignore_does_not_take_part(reproduced_goal):
    _hidden_conftest(reproduced_goal, lambda wt, d: (wt / ".gitignore").write_text("conftest.py\n.gitignore\n"))


def test_a_conftest_hidden_by_info_exclude_does_not_take_part(reproduced_goal):
    def hide(wt, goal_dir):
        exclude = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-common-dir"), "info", "exclude")
        exclude.parent.mkdir(exist_ok=True)
        exclude.write_text(exclude.read_text() + "conftest.py\n" if exclude.exists() else "conftest.py\n")

    _hidden_conftest(reproduced_goal, hide)


def test_a_conftest_hidden_by_the_goal_dir_exclude_does_not_take_part(reproduced_goal):
    def hide(wt, goal_dir):
        exclude = wt.parent / "exclude"  # LoopX's own exclude file for the goal, beside its worktree
        exclude.write_text(exclude.read_text() + "conftest.py\n")

    g, cli = _hidden_conftest(reproduced_goal, hide), reproduced_goal.cli
    # The real fix is verified, and the commit holds no conftest.
    wt = Path(state(cli, g)["worktree"])
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    assert "conftest.py" not in git(wt, "ls-tree", "--name-only", r.json["commit"])


def test_a_pth_file_dropped_into_the_venv_is_refused(cli, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The user's venv: pytest comes from LoopX's test environment through a .pth made at set-up.
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p, "pytest").is_dir()][0]
    (site / "deps.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    repo = make_project(tmp_path)
    g, wt = reproduced(cli, repo, command=f"{venv}/bin/python -m pytest -q")
    assert state(cli, g)["runner"]["interpreter"] == f"{venv}/bin/python"
    (site / "zz_evil.pth").write_text("import calc_patch\n")
    (site / "calc_patch.py").write_text("import builtins\n")
    message = refused(cli, g, "issue_fix.environment_changed")
    assert "zz_evil.pth" in message
    s = state(cli, g)
    assert s["log"][-1]["outcome"] == "environment_changed"


def test_pythonpath_and_pytest_options_from_whoever_runs_verify_do_not_reach_the_tests(reproduced_goal, tmp_path):
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "evilplugin.py").write_text(REWRITE_REPORTS)
    (evil / "sitecustomize.py").write_text("import calc\ncalc.add = lambda a, b: a + b\n")
    (wt / "calc.py").write_text(WRONG)
    doc = contract(cli, g)
    r = as_agent(cli, only(doc, "loopx issue-fix ") + " --json", PYTHONPATH=str(evil), PYTEST_ADDOPTS="-p evilplugin",
                 PYTEST_PLUGINS="evilplugin", PYTHONSTARTUP=str(evil / "sitecustomize.py"))
    assert r.code == 1 and r.json["reason"] == "test_failed", r
    # The same variables do fool a plain run in the worktree: they are what verify scrubs.
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=wt, capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(evil), "PYTEST_PLUGINS": "evilplugin"})
    assert p.returncode == 0, p.stdout


def _suite(root: Path, *, files: int = 30, per_file: int = 50) -> Path:
    """``lib.py`` and ``files * per_file`` tests; ``double(7)`` is wrong at the base."""
    code = "def double(x):\n    return x * 2 if x != 7 else 15\n"
    tests = {f"tests/test_m{n:02d}.py": "".join(
        f"def test_double_{n}_{i}():\n    from lib import double\n    assert double({n * per_file + i}) == "
        f"{2 * (n * per_file + i)}\n\n\n" for i in range(per_file)) for n in range(files)}
    repo = root / "suite"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "Dev")
    (repo / "lib.py").write_text(code)
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    for name, text in tests.items():
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "suite")
    return repo


def test_a_regression_in_a_few_tests_of_a_1500_test_suite(cli, tmp_path, loopx_registry):
    repo = _suite(tmp_path)
    out = start(cli, repo, "--test-timeout", "300")
    g, wt = out["goal_id"], Path(out["worktree"])
    r, _ = step(cli, g)
    assert r.json["failing"] == ["tests/test_m00.py::test_double_0_7"]
    # A "fix" for 7 that breaks eight other inputs.
    (wt / "lib.py").write_text("def double(x):\n    return x * 2 if x % 187 != 1 else 0\n")
    r, _ = step(cli, g, expect=1)
    broke = [f"tests/test_m{x // 50:02d}.py::test_double_{x // 50}_{x % 50}" for x in range(1, 1500) if x % 187 == 1]
    assert len(broke) == 9
    assert r.json["reason"] == "regression" and sorted(r.json["regressions"]) == sorted(broke), r
    assert r.json["pass_to_pass"] == {"total": 1499, "still_passing": 1490, "broke": 9, "missing": 0}
    # The complete results are a file whose sha256 the evidence holds.
    ev = [e for e in evidence(loopx_registry, g) if e["kind"] == "test"][-1]
    import hashlib

    data = Path(ev["file_path"]).read_bytes()
    assert ev["file_sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert len(json.loads(data)["cases"]) == 1500 and json.loads(data)["exit_status"] == 1
    (wt / "lib.py").write_text("def double(x):\n    return x * 2\n")
    r, _ = step(cli, g)
    assert r.json["verified"] is True and r.json["exit_status"] == 0
    assert r.json["pass_to_pass"]["still_passing"] == 1499


def test_publish_to_a_relative_remote_from_the_main_repository(cli, tmp_path):
    repo = make_project(tmp_path)
    git(repo, "remote", "set-url", "origin", "../project-origin.git")
    out, s = to_publish(cli, repo)
    g = out["goal_id"]
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    r, _ = step(cli, g)
    assert r.json["remote_sha"] == s["verification"]["commit"]
    assert git(origin_of(repo), "rev-parse", f"refs/heads/{out['branch']}") == s["verification"]["commit"]


def test_hooks_the_agent_wrote_do_not_run(cli, tmp_path):
    repo = make_project(tmp_path)
    marker = tmp_path / "hook-ran"
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    out = start(cli, repo)
    g, wt = out["goal_id"], Path(out["worktree"])
    hook = f"#!/bin/sh\necho ran >> {marker}\nexit 1\n"
    for where in (common / "hooks", wt / "myhooks"):
        where.mkdir(exist_ok=True)
        for name in ("pre-push", "post-checkout", "pre-commit", "reference-transaction", "post-index-change"):
            (where / name).write_text(hook)
            (where / name).chmod(0o755)
    git(repo, "config", "core.hooksPath", str(wt / "myhooks"))
    git(repo, "config", "core.fsmonitor", str(wt / "myhooks" / "pre-push"))
    step(cli, g)
    (wt / "calc.py").write_text(FIXED)
    step(cli, g)
    step(cli, g, "--root-cause", "x")
    s = state(cli, g)
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    r, _ = step(cli, g)
    assert r.json["remote_sha"] == s["verification"]["commit"]
    assert not marker.exists()


def test_a_push_by_the_agent_during_its_turn_is_detected(reproduced_goal):
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    (wt / "calc.py").write_text(FIXED)
    git(wt, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "mine")
    git(wt, "push", "-q", "origin", "HEAD:refs/heads/sneaky")
    message = refused(cli, g, "issue_fix.git_changed")
    assert "refs/heads/sneaky" in message
    # Reported once: the next verify proves the fix, and the packet says what happened.
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    r, _ = step(cli, g, "--root-cause", "add subtracted")
    assert any("refs/heads/sneaky" in w for w in r.json["warnings"]), r.json["warnings"]


def test_closing_removes_the_worktree_and_branch_and_clean_removes_leftovers(cli, tmp_path):
    repo = make_project(tmp_path)
    # Published: the goal closes, its worktree and local branch go; the packet stays.
    out, s = to_publish(cli, repo)
    g = out["goal_id"]
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    step(cli, g)
    assert not Path(out["worktree"]).exists() and git(repo, "branch", "--list", out["branch"]) == ""
    assert Path(s["handoff"]["packet"]).is_file()
    assert git(origin_of(repo), "rev-parse", f"refs/heads/{out['branch']}") == s["verification"]["commit"]
    # Closed by hand: removed; with --keep: kept.
    a = start(cli, repo)
    r = cli("issue-fix", "close", "--goal-id", a["goal_id"], "--json")
    assert r.code == 0 and r.json["removed"], r
    assert not Path(a["worktree"]).exists() and git(repo, "branch", "--list", a["branch"]) == ""
    b = start(cli, repo)
    assert cli("issue-fix", "close", "--goal-id", b["goal_id"], "--keep").code == 0
    assert Path(b["worktree"]).is_dir() and git(repo, "branch", "--list", b["branch"]) != ""
    # Closed through the core: a leftover that `clean` removes; open goals and kept ones stay.
    c, d = start(cli, repo), start(cli, repo)
    assert cli("project_prompt", "close", "--goal-id", c["goal_id"]).code == 0
    assert Path(c["worktree"]).is_dir()
    r = cli("issue-fix", "clean", "--repo", repo, "--json")
    assert r.code == 0, r
    assert [x["goal_id"] for x in r.json["removed"]] == [c["goal_id"]]
    assert not Path(c["worktree"]).exists() and git(repo, "branch", "--list", c["branch"]) == ""
    assert Path(d["worktree"]).is_dir() and Path(b["worktree"]).is_dir()
    assert "loopx-issue-fix" not in git(repo, "worktree", "list").replace(d["worktree"], "").replace(b["worktree"], "")


def test_a_test_change_a_user_approves_verifies_with_a_warning(reproduced_goal):
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    (wt / "conftest.py").write_text("# a fixture the fix needs\n")
    (wt / "calc.py").write_text(FIXED)
    refused(cli, g, "issue_fix.tests_changed")
    s = state(cli, g)
    gate = s["test_change_gate"]
    assert list(gate["files"]) == ["conftest.py"]
    # Still refused while the gate is pending; approved, exactly that change verifies.
    refused(cli, g, "issue_fix.tests_changed")
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate["gate_id"]).code == 0
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    r, _ = step(cli, g, "--root-cause", "x")
    assert any("approved" in w and "conftest.py" in w for w in r.json["warnings"]), r.json["warnings"]


def test_the_packet_splits_the_diff_and_warns_about_literals_from_the_failing_test(reproduced_goal):
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    # Special-casing: the "fix" returns the expected value for the test's input only.
    (wt / "calc.py").write_text(BUGGY.replace("    return a - b\n", "    if (a, b) == (2, 3):\n        return 5\n"
                                              "    return a - b\n", 1))
    (wt / "NOTES.md").write_text("why\n")
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    r, _ = step(cli, g, "--root-cause", "x")
    packet = r.json["packet"]
    assert any("literal" in w and "5" in w for w in r.json["warnings"]), r.json["warnings"]
    for needle in ("### Source", "`calc.py`", "### Other", "`NOTES.md`", "## Tests that flipped",
                   "`test_calc.py::test_add`", "PASS_TO_PASS"):
        assert needle in packet, needle
    assert TEST  # the test module is unchanged


def test_several_test_changes_in_one_attempt_are_one_gate_showing_their_diff(cli, tmp_path):
    repo = make_project(tmp_path)
    (repo / "conftest.py").write_text("# shared fixtures\n")
    git(repo, "add", "conftest.py")
    git(repo, "commit", "-qm", "conftest")
    g, wt = reproduced(cli, repo)
    # One attempt changes two test files: the base conftest, and a new one in a tests/ directory.
    (wt / "conftest.py").write_text(MONKEYPATCH)
    (wt / "tests").mkdir()
    (wt / "tests" / "conftest.py").write_text(REWRITE_REPORTS)
    refused(cli, g, "issue_fix.tests_changed")
    gates = cli("gate", "list", "--goal-id", g, "--json").json
    assert len(gates) == 1, gates
    assert "conftest.py, tests/conftest.py" in gates[0]["title"] and f"issue-fix show {g}" in gates[0]["title"]
    # The user reads the diff before deciding: both files' changes, in the JSON and the text.
    tc = state(cli, g)["test_change"]
    assert tc["gate_id"] == gates[0]["id"] and tc["status"] == "pending"
    assert tc["files"] == ["conftest.py", "tests/conftest.py"]
    for needle in ("-# shared fixtures", "+calc.add = _add", "+++ b/tests/conftest.py", '+    report.outcome = "passed"'):
        assert needle in tc["diff"], needle
    text = cli("issue-fix", "show", "--goal-id", g)
    assert text.code == 0 and f"test-change gate {tc['gate_id']} (pending)" in text.out
    assert "+calc.add = _add" in text.out and "(sha256 verified)" in text.out
    # The same change refused again asks nothing new; the diff changed behind LoopX is not shown.
    refused(cli, g, "issue_fix.tests_changed")
    assert len(cli("gate", "list", "--goal-id", g, "--json").json) == 1
    Path(tc["diff_path"]).write_text("+harmless\n")
    r = cli("issue-fix", "show", "--goal-id", g, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "artifact_tampered", r


# The hostile agent in a real confined `command`-executor turn (run in the worktree): it hides a
# report-rewriting conftest from git, tries to approve the pending test-change gate itself (the
# broker refuses it), then runs the contract's lines (verify).
TURN_AGENT = r'''
import os, re, subprocess, sys
open("conftest.py", "w").write(sys.argv[3])
open(".gitignore", "w").write("conftest.py\n.gitignore\n")
subprocess.run(["loopx", "gate", "approve", "--goal-id", sys.argv[1], "--gate-id", sys.argv[2]])
prompt = open(os.environ["LOOPX_PROMPT_FILE"]).read()
for line in re.search(r"```sh\n(.*?)\n```", prompt, re.S).group(1).splitlines():
    subprocess.run(line, shell=True, check=False)
'''


def test_the_packet_lists_refused_and_blocked_attempts_and_every_ignored_file(reproduced_goal, tmp_path):
    cli, g, wt = reproduced_goal.cli, reproduced_goal.goal_id, reproduced_goal.worktree
    (wt / "conftest.py").write_text(REWRITE_REPORTS)
    refused(cli, g, "issue_fix.tests_changed")  # blocked by a guard; a test-change gate asked
    gate = state(cli, g)["test_change"]["gate_id"]
    (wt / "conftest.py").unlink()
    (tmp_path / "agent.py").write_text(TURN_AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_") or k == "LOOPX_ISSUE_FIX_WORKTREES"}
    env.update({"LOOPX_REGISTRY": cli.url, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
                "LOOPX_EXECUTOR_COMMAND": json.dumps([sys.executable, str(tmp_path / "agent.py"), g, gate,
                                                      REWRITE_REPORTS])})
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "turn", "--goal-id", g, "--executor",
                        "command"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    t = json.loads(p.stdout)
    assert t["outcome"] == "failed" and t["reason"] == "refused_command", (t, p.stderr[-2000:])
    s = state(cli, g)
    # The gate stays pending; the agent's verify ran without the hidden conftest: still red.
    assert s["test_change"]["status"] == "pending" and s["log"][-1]["outcome"] == "test_failed", s["log"]
    # The agent's hidden conftest is gone before the green verify: only the earlier attempt saw it.
    (wt / "conftest.py").unlink()
    (wt / ".gitignore").unlink()
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True and r.json["ignored"] == []
    r, _ = step(cli, g, "--root-cause", "add used subtraction")
    packet = r.json["packet"]
    section = packet.split("## Refused and blocked attempts", 1)[1].split("## Diff", 1)[0]
    assert "1 command(s) refused inside a turn, 1 attempt(s) blocked by a guard." in section, section
    assert f"`loopx gate approve --goal-id {g} --gate-id {gate}`" in section, section
    assert "**blocked** verify `tests_changed`" in section and "conftest.py changed" in section, section
    ignored = section.split("## Files verify did not use", 1)[1]
    assert "- `conftest.py`" in ignored, ignored

"""Issue-Fix on real git repositories: a worktree of its own, red and green from JUnit reports,
the verified commit, the reviewer packet, the gate requested at the hand-off, and publishing
exactly the verified commit to a bare remote."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from issue_fix_helpers import (FAILING_ID, FIXED, PY, TEST_COMMAND, WRONG, as_agent, git, make_project,
                               origin_of, project_python)


def start(cli, repo, *extra, text="add(2, 3) returns -1 instead of 5", command=TEST_COMMAND, code=0):
    r = cli("issue-fix", "start", "--repo", repo, "--title", "add subtracts", "--issue-text", text,
            "--test-command", command, *extra, "--json")
    assert r.code == code, r
    return r.json


def contract(cli, goal_id):
    r = cli("quota", "should-run", "--goal-id", goal_id, "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.code == 0, r
    return r.json


def actions(doc):
    """The contract's lines, a capability step (``loopx exec ... -- loopx issue-fix ...``) as the
    command it runs: an agent may run that by hand, and LoopX records it as the step."""
    return [a.split(" -- ", 1)[1] if a.startswith("loopx exec ") and " -- loopx " in a else a
            for a in doc["interaction_contract"]["cli_channel"]["next_cli_actions"]]


def only(doc, word):
    """The one contract action containing ``word``."""
    found = [a for a in actions(doc) if word in a]
    assert len(found) == 1, (word, actions(doc))
    return found[0]


def state(cli, goal_id):
    r = cli("issue-fix", "show", "--goal-id", goal_id, "--json")
    assert r.code == 0, r
    return r.json


def evidence(reg, goal_id):
    with reg.read() as tx:
        rows = tx.query("SELECT * FROM evidence WHERE goal_id = ? ORDER BY created_at, id", (goal_id,))
    for row in rows:
        row["data"] = json.loads(row["data"]) if row["data"] else None
    return rows


def step(cli, goal_id, *extra, expect=0, end=True):
    """Ask for a contract, run its one issue-fix step (with ``extra`` options) as the agent, finish the run."""
    doc = contract(cli, goal_id)
    assert doc["decision"] == "run", doc
    r = as_agent(cli, only(doc, "loopx issue-fix ") + "".join(" " + shlex.quote(str(x)) for x in extra) + " --json")
    assert r.code == expect, r
    if end:
        finish(cli, doc)
    return r, doc


def finish(cli, doc):
    r = as_agent(cli, only(doc, "loopx run finish"))
    assert r.code == 0, r


def to_publish(cli, repo, *extra):
    """Start, reproduce, fix, verify and hand off: the goal waits for the publish gate."""
    out = start(cli, repo, *extra)
    g = out["goal_id"]
    step(cli, g)
    Path(out["worktree"], "calc.py").write_text(FIXED)
    step(cli, g)
    step(cli, g, "--root-cause", "add used subtraction")
    return out, state(cli, g)


def test_declared_capability_and_document_agree():
    from loopx import api
    from loopx.testing import capability_doc_problems

    cap = api.state.capability("issue_fix")
    assert cap.owns == ("issue_fix",)
    assert set(cap.actions) == {"reproduce", "verify", "handoff", "publish"}
    root = Path(__file__).resolve().parents[3]
    assert capability_doc_problems("issue_fix", doc_root=root) == []
    text = (root / cap.doc).read_text()
    from loopx_issue_fix.plugin import ERROR_CODES

    for code in ERROR_CODES:
        assert f"`{code}`" in text, code


def test_its_refusal_codes_are_registered_through_loopx_register_error_codes():
    from loopx.api import LoopxError
    from loopx_issue_fix.plugin import ERROR_CODES

    for code in ERROR_CODES:
        assert code.startswith("issue_fix.")
        assert LoopxError(code, "m").to_json() == {"error": {"code": code, "message": "m"}}
    # The core holds none of Issue-Fix's codes: they exist only while the plugin is loaded.
    import inspect

    core = Path(inspect.getsourcefile(LoopxError)).read_text()
    assert "issue_fix" not in core and "reproduc" not in core


@pytest.mark.slow
def test_start_works_in_its_own_worktree_and_leaves_a_dirty_checkout_alone(cli, project):
    # The user's checkout has uncommitted edits (the fix, even) and an untracked file.
    (project / "calc.py").write_text(FIXED)
    (project / "notes.txt").write_text("mine\n")
    status_before = git(project, "status", "--porcelain")
    head_before = git(project, "rev-parse", "HEAD")
    r = cli("issue-fix", "start", "--repo", project, "--title", "add subtracts", "--issue-text", "x",
            "--test-command", TEST_COMMAND)
    assert r.code == 0, r
    assert "uncommitted changes; they are not used and not touched" in r.out
    g = r.out.split()[0]
    # The goal uses the capability, so its contracts get Issue-Fix's steps (and only such goals do).
    assert cli("project_prompt", "show", "--goal-id", g, "--json").json["capabilities"] == ["issue_fix"]
    s = state(cli, g)
    wt = Path(s["worktree"])
    assert s["user_checkout"]["dirty"] is True and set(s["user_checkout"]["dirty_paths"]) == {"calc.py", "notes.txt"}
    # The worktree is at the clean base commit, on the goal's branch; the checkout is as it was.
    assert git(wt, "rev-parse", "HEAD") == head_before == s["branch"]["base_commit"]
    assert git(wt, "rev-parse", "--abbrev-ref", "HEAD") == s["branch"]["name"]
    assert (wt / "calc.py").read_text() != FIXED and not (wt / "notes.txt").exists()
    assert git(project, "status", "--porcelain") == status_before
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert (project / "calc.py").read_text() == FIXED
    # The dirty fix is not folded in: the tests fail in the worktree.
    r, _ = step(cli, g)
    assert r.json["reproduced"] is True and r.json["failing"] == [FAILING_ID]
    assert git(project, "status", "--porcelain") == status_before


def test_start_refusals_write_nothing(cli, project, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    r = cli("issue-fix", "start", "--repo", plain, "--title", "t", "--issue-text", "x",
            "--test-command", TEST_COMMAND, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "issue_fix.not_a_repository"
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-text", "x", "--base", "nope",
            "--test-command", TEST_COMMAND, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument" and "--base" in r.json["error"]["message"]
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--test-command", TEST_COMMAND, "--json")
    assert r.json["error"]["code"] == "invalid_argument"
    # A runner that writes no JUnit report is refused up front.
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-text", "x",
            "--test-command", "make test", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument" and "JUnit" in r.json["error"]["message"]
    # gh is not installed here: publishing through it is refused at start.
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-text", "x",
            "--test-command", TEST_COMMAND, "--publish", "gh", "--json", env={"PATH": "/usr/bin:/bin"})
    assert r.code == 2 and r.json["error"]["code"] == "issue_fix.publish_unavailable", r
    # An executor cannot create goals; the worktree and branch made for it are taken back.
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-text", "x",
            "--test-command", TEST_COMMAND, "--branch", "fix-1", "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.json["error"]["code"] == "actor_forbidden"
    assert git(project, "branch", "--list", "fix-1") == ""
    assert "loopx-issue-fix" not in git(project, "worktree", "list")
    assert cli("project_prompt", "list", "--json").json == []
    git(project, "branch", "taken")
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-text", "x",
            "--test-command", TEST_COMMAND, "--branch", "taken", "--json")
    assert r.json["error"]["code"] == "issue_fix.branch_exists"
    assert cli("project_prompt", "list", "--json").json == []


@pytest.mark.slow
def test_red_green_packet_gate_at_handoff_publish_exact_commit_and_close(cli, project, loopx_registry):
    out = start(cli, project)
    g, wt = out["goal_id"], Path(out["worktree"])

    # No gate yet, so nothing waits for review.
    assert cli("gate", "list", "--goal-id", g, "--json").json == []
    overview = cli("status", "--json").json
    assert "gate_pending" not in json.dumps(overview)

    # Turn 1: one step, with its time limit (the quota need: 60 s); no separate test action.
    doc = contract(cli, g)
    run1 = doc["interaction_contract"]["run_id"]
    assert only(doc, "issue-fix") == f"loopx issue-fix reproduce --run-id {run1} --timeout 60"
    assert not any("--action" in a for a in actions(doc))
    r = as_agent(cli, only(doc, "issue-fix") + " --json")
    assert r.code == 0, r
    assert r.json["reproduced"] is True and r.json["failing"] == [FAILING_ID] and r.json["phase"] == "fix"
    assert r.json["test"]["cases"][FAILING_ID]["status"] == "failed"
    assert r.json["test"]["cases"]["test_calc.py::test_sub"]["status"] == "passed"
    assert r.json["test_files"] == ["test_calc.py"]
    # The report went to the goal's directory, not into the worktree.
    assert git(wt, "status", "--porcelain") == ""
    finish(cli, doc)

    # Turn 2: a wrong fix: verify fails, the phase stays fix, nothing is committed.
    (wt / "calc.py").write_text(WRONG)
    r, doc = step(cli, g, expect=1, end=False)
    assert r.json["verified"] is False and r.json["reason"] == "test_failed" and r.json["commit"] is None
    assert git(wt, "rev-parse", "HEAD") == out["base_commit"]
    finish(cli, doc)
    assert state(cli, g)["todo_status"]["verify"] == "open"

    # Turn 3: the right fix, left uncommitted: verify proves it and commits exactly that code.
    (wt / "calc.py").write_text(FIXED)
    r, doc = step(cli, g, end=False)
    assert r.json["verified"] is True and r.json["phase"] == "handoff"
    commit = r.json["commit"]
    assert git(wt, "rev-parse", "HEAD") == commit
    assert git(wt, "rev-parse", f"{commit}^") == out["base_commit"]
    assert git(wt, "log", "-1", "--format=%an", commit) == "LoopX Issue-Fix"
    assert git(wt, "rev-parse", f"{commit}^{{tree}}") == r.json["tree"]
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "show", f"{commit}:calc.py") + "\n" == FIXED
    finish(cli, doc)
    s = state(cli, g)
    assert s["verification"]["commit"] == commit and s["attempts"]["verify"] == 2
    assert cli("gate", "list", "--goal-id", g, "--json").json == []

    # Turn 4: the packet; the publish gate is requested now, for this commit.
    r, doc = step(cli, g, "--root-cause", "add() used subtraction", end=False)
    packet = r.json["packet"]
    assert Path(r.json["packet_path"]).read_text() == packet
    for needle in ("add(2, 3) returns -1 instead of 5", "add() used subtraction", FAILING_ID,
                   f"| `{FAILING_ID}` | failed | passed |", s["reproduction"]["evidence_id"],
                   s["verification"]["evidence_id"], "-    return a - b", "+    return a + b", commit,
                   "## Environment", "test command: `" + TEST_COMMAND, f"test interpreter: `{project_python()}`",
                   f"test runner: pytest {pytest.__version__}", "| 2 | verify | test_failed |",
                   "1 failed attempt(s)", "AssertionError"):
        assert needle in packet, needle
    assert "WARNING" not in packet
    finish(cli, doc)
    [gate] = cli("gate", "list", "--goal-id", g, "--json").json
    assert gate["status"] == "pending" and gate["scope"] == "production" and commit[:12] in gate["title"]
    assert "gate_pending" in json.dumps(cli("status", "--json").json)
    doc = contract(cli, g)
    assert doc["decision"] == "ask_user" and not any("publish" in a for a in actions(doc))
    assert git(origin_of(project), "branch", "--list") == ""

    # A user approves; the next contract offers publish; exactly the verified commit is pushed.
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate["id"]).code == 0
    r, doc = step(cli, g, end=False)
    assert only(doc, "issue-fix").startswith("loopx issue-fix publish --run-id ")
    assert r.json["remote_sha"] == commit
    assert git(origin_of(project), "rev-parse", f"refs/heads/{out['branch']}") == commit
    finish(cli, doc)
    s = state(cli, g)
    assert s["phase"] == "published" and s["status"] == "closed"
    assert all(c["met"] for c in s["criteria"])
    assert set(s["todo_status"].values()) == {"done"}
    pub = [e for e in evidence(loopx_registry, g) if e["kind"] == "publish"]
    assert [e["data"]["remote_sha"] for e in pub] == [commit]
    # The user's checkout never moved.
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(project, "rev-parse", "HEAD") == out["base_commit"]

    from loopx import api

    with loopx_registry.read() as tx:
        assert api.goals.replay(api.goals.events(tx, g))[0] == api.goals.snapshot(tx, g)


@pytest.mark.slow
def test_an_edit_after_verify_is_not_published(handed_off_goal):
    cli, project = handed_off_goal.cli, handed_off_goal.project
    out, s = handed_off_goal.start, state(cli, handed_off_goal.goal_id)
    g, wt = out["goal_id"], Path(out["worktree"])
    verified = s["verification"]["commit"]
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    # After approval the code in the worktree changes without a commit.
    (wt / "calc.py").write_text(FIXED + "\nimport os\nos.system('echo owned')\n")
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.changed_since_verify", r
    assert "calc.py" in r.json["error"]["message"]
    assert git(origin_of(project), "branch", "--list") == ""
    s = state(cli, g)
    assert s["phase"] == "fix" and s["verification"] is None and s["publish_gate"] is None
    assert s["todo_status"]["verify"] == "open" and s["todo_status"]["handoff"] == "open"
    assert s["log"][-1]["outcome"] == "changed_since_verify"
    # The goal is back at verify: the next step re-verifies the new code.
    doc = contract(cli, g)
    assert "loopx issue-fix verify" in only(doc, "issue-fix")
    assert git(wt, "rev-parse", "HEAD") == verified


@pytest.mark.slow
def test_a_commit_after_approval_is_not_published(handed_off_goal):
    cli, project = handed_off_goal.cli, handed_off_goal.project
    out, s = handed_off_goal.start, state(cli, handed_off_goal.goal_id)
    g, wt = out["goal_id"], Path(out["worktree"])
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    (wt / "calc.py").write_text(FIXED + "\nimport os\nos.system('echo owned')\n")
    git(wt, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-qam", "sneak")
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.changed_since_verify"
    assert "branch head" in r.json["error"]["message"]
    assert git(origin_of(project), "branch", "--list") == ""
    assert state(cli, g)["phase"] == "fix"
    # Verifying again asks for a new decision: a new gate, for the new commit.
    step(cli, g)
    step(cli, g)
    s2 = state(cli, g)
    assert s2["publish_gate"] != s["publish_gate"] and s2["publish_gate_status"] == "pending"
    assert contract(cli, g)["decision"] == "ask_user"


@pytest.mark.slow
def test_editing_or_deleting_the_failing_test_is_weakening(cli, project, loopx_registry):
    out = start(cli, project)
    g, wt = out["goal_id"], Path(out["worktree"])
    step(cli, g)
    test_file = wt / "test_calc.py"
    original = test_file.read_text()
    # Edited: the assertion is loosened.
    test_file.write_text(original.replace("== 5", "== -1"))
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.tests_weakened" and "test_calc.py" in r.json["error"]["message"]
    # Deleted: the failing test is gone.
    test_file.write_text(original.split("def test_add")[0] + "def test_sub():\n    assert sub(5, 3) == 2\n")
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.tests_weakened"
    test_file.unlink()
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.tests_weakened"
    s = state(cli, g)
    assert s["phase"] == "fix" and "verification" not in s or s.get("verification") is None
    assert [a["outcome"] for a in s["log"]] == ["red", "tests_weakened", "tests_weakened", "tests_weakened"]
    assert git(wt, "rev-parse", "HEAD") == out["base_commit"]
    # Three runs in a row failed at the verify step: LoopX asks a user before a fourth.
    stuck = contract(cli, g)
    assert stuck["reasons"] == ["repeated_failure"]
    assert stuck["interaction_contract"]["repeated_failure"]["step"] == "issue_fix:verify"
    assert cli("project-prompt", "retry", "--goal-id", g, "--json").code == 0
    # Restored and fixed properly, it verifies.
    test_file.write_text(original)
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True


@pytest.mark.slow
def test_test_changes_allowed_at_start_verify_with_a_loud_warning(cli, project):
    out = start(cli, project, "--allow-test-changes")
    g, wt = out["goal_id"], Path(out["worktree"])
    step(cli, g)
    (wt / "test_calc.py").write_text((wt / "test_calc.py").read_text().replace("== 5", "== -1"))
    r, _ = step(cli, g)
    assert r.json["verified"] is True
    r, _ = step(cli, g)
    assert "only test files changed" in r.json["packet"] and "> **WARNING" in r.json["packet"]
    assert any("only test files changed" in w for w in r.json["warnings"])


@pytest.mark.slow
def test_output_files_of_the_test_run_are_not_a_change_and_flaky_is_caught(cli, tmp_path):
    # Fails while the harness keeps a file there (the run itself may write only its own directory).
    (tmp_path / "weather").mkdir()
    storm = tmp_path / "weather" / "storm"
    storm.write_text("")
    flaky = ("import pathlib\n\n\ndef test_flaky():\n"
             f"    assert not pathlib.Path({str(storm)!r}).exists()\n")
    repo = make_project(tmp_path, test=flaky)
    # The command also writes report.xml and out.log into the worktree, as many runners do.
    command = (f"{PY} -m pytest -q --junitxml={{report}} -o junit_family=xunit1 -p no:cacheprovider; rc=$?; "
               "date +%N > report.xml; date +%N > out.log; exit $rc")
    g = start(cli, repo, command=command)["goal_id"]
    r, _ = step(cli, g)
    assert r.json["failing"] == ["test_calc.py::test_flaky"]
    storm.unlink()
    r, _ = step(cli, g, expect=1)
    assert r.json["test"]["cases"]["test_calc.py::test_flaky"]["status"] == "passed"
    assert r.json["verified"] is False and r.json["reason"] == "unchanged"
    s = state(cli, g)
    assert s["flaky"] == ["test_calc.py::test_flaky"] and s["phase"] == "fix"
    # The tests ran on a clean copy: what they wrote never reaches the worktree.
    wt = Path(s["worktree"])
    assert not (wt / "out.log").exists() and not (wt / "report.xml").exists()
    assert git(wt, "status", "--porcelain") == ""


@pytest.mark.slow
def test_what_is_not_a_test_failure_is_refused_and_never_red(cli, project, tmp_path, loopx_registry):
    # The runner's module is missing: exit 1, but no test ran.
    out = start(cli, project, command="/usr/bin/python3 -m pytest -q")
    g = out["goal_id"]
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.not_a_test_failure", r
    assert "No module named 'pytest'" in r.json["error"]["message"]
    # The command does not exist.
    g2 = start(cli, make_project(tmp_path / "b"), command="no-such-runner --xml {report}")["goal_id"]
    r, _ = step(cli, g2, expect=2)
    assert r.json["error"]["code"] == "issue_fix.not_a_test_failure" and "could not be run" in r.json["error"]["message"]
    # A test module imports a missing module: a collection error.
    repo3 = make_project(tmp_path / "c", test="import no_such_module\n\n\ndef test_x():\n    assert False\n")
    g3 = start(cli, repo3)["goal_id"]
    r, _ = step(cli, g3, expect=2)
    assert r.json["error"]["code"] == "issue_fix.not_a_test_failure", r
    for goal in (g, g2, g3):
        s = state(cli, goal)
        assert s["phase"] == "reproduce" and "reproduction" not in s
        assert s["log"][-1]["outcome"] == "not_a_test_failure"
        assert s["todo_status"]["reproduce"] == "open"
        doc = contract(cli, goal)
        r = as_agent(cli, f"loopx issue-fix verify --run-id {doc['interaction_contract']['run_id']} --json")
        assert r.json["error"]["code"] == "issue_fix.not_reproduced"
    [ev] = [e for e in evidence(loopx_registry, g) if e["actor"] == "capability:issue_fix"]
    assert ev["data"]["outcome"] == "not_a_test_failure" and "not counted as red" in ev["summary"]


@pytest.mark.slow
def test_nothing_failing_is_not_a_reproduction(cli, tmp_path, loopx_registry):
    repo = make_project(tmp_path, code=FIXED)
    g = start(cli, repo)["goal_id"]
    doc = contract(cli, g)
    run = doc["interaction_contract"]["run_id"]
    for name in ("verify", "handoff"):
        r = as_agent(cli, f"loopx issue-fix {name} --run-id {run} --json")
        assert r.code == 2 and r.json["error"]["code"] == "issue_fix.not_reproduced", r
    assert evidence(loopx_registry, g) == []
    r = as_agent(cli, f"loopx issue-fix reproduce --run-id {run} --json")
    assert r.code == 1 and r.json["reproduced"] is False and r.json["phase"] == "reproduce"
    assert state(cli, g)["log"][-1]["outcome"] == "not_reproduced"


@pytest.mark.slow
def test_steps_are_refused_under_a_stale_contract_and_run_nothing(cli, project, tmp_path):
    import socket

    # The command calls the test back (a run may write only its own directory, but connect out).
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    call = shlex.quote(f"import socket; socket.create_connection(('127.0.0.1', {port}))")
    g = start(cli, project, command=f"{PY} -c {call}; {TEST_COMMAND}")["goal_id"]

    def called() -> bool:
        try:
            listener.accept()[0].close()
            return True
        except TimeoutError:
            return False

    run = contract(cli, g)["interaction_contract"]["run_id"]
    assert cli("quota", "set", "--goal-id", g, "--max-turns", "5").code == 0
    r = as_agent(cli, f"loopx issue-fix reproduce --run-id {run} --json")
    assert r.code == 2 and r.json["error"]["code"] == "contract_stale", r
    assert not called()
    assert contract(cli, g)["interaction_contract"]["run_id"] == run
    r = as_agent(cli, f"loopx issue-fix reproduce --run-id {run} --json")
    assert r.code == 0 and called()
    listener.close()


def test_other_goals_get_nothing_from_issue_fix(cli):
    g = cli("project_prompt", "create", "--title", "plain goal", "--json").json["id"]
    assert cli("todo", "add", "--goal-id", g, "--text", "step").code == 0
    doc = contract(cli, g)
    assert not any("issue-fix" in a for a in actions(doc))
    r = cli("issue-fix", "show", "--goal-id", g, "--json")
    assert r.json["error"]["code"] == "issue_fix.not_an_issue_fix_goal"


@pytest.mark.slow
def test_a_failed_re_verify_takes_the_green_back(cli, project):
    out = start(cli, project)
    g, wt = out["goal_id"], Path(out["worktree"])
    step(cli, g)
    (wt / "calc.py").write_text(FIXED)
    doc = contract(cli, g)
    run = doc["interaction_contract"]["run_id"]
    assert as_agent(cli, only(doc, "issue-fix") + " --json").code == 0
    assert state(cli, g)["phase"] == "handoff"
    # Same run: the agent breaks it again and verifies once more before the hand-off.
    (wt / "calc.py").write_text(WRONG)
    r = as_agent(cli, f"loopx issue-fix verify --run-id {run} --json")
    assert r.code == 1 and r.json["reason"] == "test_failed"
    # Back in fix: a hand-off now is out of phase.
    r = as_agent(cli, f"loopx issue-fix handoff --run-id {run} --json")
    assert r.code == 2 and r.json["error"]["code"] == "issue_fix.wrong_phase", r
    assert "a fix, then issue-fix verify" in r.json["error"]["message"]
    s = state(cli, g)
    assert s["phase"] == "fix" and s["verification"] is None
    assert s["todo_status"]["fix"] == "open" and s["todo_status"]["verify"] == "open"

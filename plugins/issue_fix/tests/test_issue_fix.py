"""Issue-Fix on real git repositories: red then green, the hand-off packet, the gated publish."""

from __future__ import annotations

import json
import shlex
import sys

from issue_fix_helpers import FIXED, TEST_COMMAND, as_agent, git, make_project


def start(cli, repo, *extra, text="add(2, 3) returns -1 instead of 5", command=TEST_COMMAND):
    r = cli("issue-fix", "start", "--repo", repo, "--title", "add subtracts", "--issue-text", text,
            "--test-command", command, *extra, "--json")
    assert r.code == 0, r
    return r.json


def contract(cli, goal_id):
    r = cli("quota", "should-run", "--goal-id", goal_id, "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.code == 0, r
    return r.json


def actions(doc):
    return doc["interaction_contract"]["cli_channel"]["next_cli_actions"]


def only(doc, word):
    """The one contract action containing ``word``."""
    found = [a for a in actions(doc) if word in a]
    assert len(found) == 1, (word, actions(doc))
    return found[0]


def capability_command(line):
    """The capability's own command in a contract's do step (``loopx exec ... -- loopx issue-fix ...``).

    Run by hand as here, it still counts as the step: LoopX records its exit status.
    """
    assert line.startswith("loopx exec --run-id ") and " -- " in line, line
    return line.split(" -- ", 1)[1]


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


def finish_turn(cli, doc, *, claimed=True):
    """The record/finish tail of a contract: mark the claimed todo done, finish the run."""
    if claimed:
        r = as_agent(cli, only(doc, "loopx todo done"))
        assert r.code == 0, r
    r = as_agent(cli, only(doc, "loopx run finish"))
    assert r.code == 0, r


def test_declared_capability_and_document_agree():
    from pathlib import Path

    from loopx import capabilities

    cap = capabilities.get("issue_fix")
    assert cap.owns == ("issue_fix",)
    assert set(cap.actions) == {"reproduce", "verify", "handoff"}
    assert cap.commands == ("issue-fix",)
    assert cap.distribution and cap.distribution.startswith("loopx-issue-fix ")
    doc = Path(__file__).resolve().parents[3] / cap.doc
    assert capabilities.check_doc(cap, doc.read_text()) == []


def test_start_builds_the_goal_in_one_go(cli, project, loopx_registry):
    out = start(cli, project)
    g = out["goal_id"]
    assert out["phase"] == "reproduce"
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD") == out["branch"]
    assert out["base_commit"] == git(project, "rev-parse", "HEAD")

    todos = cli("todo", "list", "--goal-id", g, "--json").json
    by_id = {t["id"]: t for t in todos}
    chain = [out["todos"][s] for s in ("reproduce", "fix", "verify", "handoff", "publish")]
    assert [by_id[t]["depends_on"] for t in chain] == [[], *[[p] for p in chain[:-1]]]

    gates = cli("gate", "list", "--goal-id", g, "--json").json
    assert [(x["id"], x["scope"], x["status"], x["blocks"]) for x in gates] == [
        (out["publish_gate"], "production", "pending", f"todo:{out['todos']['publish']}")]
    with loopx_registry.read() as tx:
        acts = {r["name"]: r for r in tx.query("SELECT * FROM actions WHERE goal_id = ?", (g,))}
    assert set(acts) == {"publish"}
    assert acts["publish"]["gate_id"] == out["publish_gate"]

    s = state(cli, g)
    assert s["repo"] == str(project.resolve())
    assert s["test_command"] == TEST_COMMAND and s["issue"]["text"].startswith("add(2, 3)")
    assert s["attempts"] == {"reproduce": 0, "verify": 0}
    assert s["publish_gate_status"] == "pending"

    history = cli("history", "--goal-id", g, "--json").json
    state_events = [e for e in history if e["kind"] == "capability.state_set"]
    assert [e["actor"] for e in state_events] == ["capability:issue_fix"]
    assert {e["actor"] for e in history if e["kind"] != "capability.state_set"} == {"user"}


def test_start_refusals_write_nothing(cli, project, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    r = cli("issue-fix", "start", "--repo", plain, "--title", "t", "--issue-text", "x",
            "--test-command", "true", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "issue_fix_error"
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--test-command", "true", "--json")
    assert r.json["error"]["code"] == "invalid_argument"
    issue = tmp_path / "issue.md"
    issue.write_text("x")
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-text", "x", "--issue-file", issue,
            "--test-command", "true", "--json")
    assert r.json["error"]["code"] == "invalid_argument"
    # An executor cannot create goals; the branch made for it is taken back.
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-file", issue,
            "--test-command", "true", "--branch", "fix-1", "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.json["error"]["code"] == "actor_forbidden"
    assert git(project, "branch", "--list", "fix-1") == ""
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert cli("project_prompt", "list", "--json").json == []
    # A branch that exists already is refused before anything is written.
    git(project, "branch", "taken")
    r = cli("issue-fix", "start", "--repo", project, "--title", "t", "--issue-file", issue,
            "--test-command", "true", "--branch", "taken", "--json")
    assert r.json["error"]["code"] == "issue_fix_error"
    assert cli("project_prompt", "list", "--json").json == []


def test_red_then_green_then_handoff_then_gated_publish(cli, project, loopx_registry):
    out = start(cli, project)
    g = out["goal_id"]

    # Turn 1: the contract names the reproduce step; it sees the test fail.
    doc = contract(cli, g)
    assert doc["decision"] == "run"
    step = capability_command(only(doc, "issue-fix"))
    run1 = doc["interaction_contract"]["run_id"]
    assert step == f"loopx issue-fix reproduce --run-id {run1}"
    assert not any("publish" in a for a in actions(doc))
    assert as_agent(cli, only(doc, "todo claim")).code == 0
    r = as_agent(cli, step + " --json")
    assert r.code == 0, r
    assert r.json["reproduced"] is True and r.json["phase"] == "fix"
    assert r.json["test"]["exit_code"] != 0 and "AssertionError" in r.json["test"]["output_tail"]
    finish_turn(cli, doc)

    # Turn 2: the step is verify. Before the fix it still fails and the goal stays in fix.
    doc = contract(cli, g)
    step = capability_command(only(doc, "issue-fix"))
    assert step.startswith("loopx issue-fix verify --run-id ")
    assert as_agent(cli, only(doc, "todo claim")).code == 0
    r = as_agent(cli, step + " --json")
    assert r.code == 1 and r.json["verified"] is False and r.json["reason"] == "test_failed"
    # The agent fixes the code, commits, and verifies: green.
    (project / "calc.py").write_text(FIXED)
    git(project, "commit", "-q", "-am", "calc: add adds")
    r = as_agent(cli, step + " --json")
    assert r.code == 0, r
    assert r.json["verified"] is True and r.json["phase"] == "handoff"
    assert r.json["commit"] == git(project, "rev-parse", "HEAD")
    assert r.json["diff"]["files_changed"] == 1 and r.json["diff"]["files"][0]["path"] == "calc.py"
    finish_turn(cli, doc)
    s = state(cli, g)
    assert s["attempts"] == {"reproduce": 1, "verify": 2}
    assert s["todo_status"] == {"reproduce": "done", "fix": "done", "verify": "done", "handoff": "open",
                                "publish": "open"}

    # Turn 3: the hand-off packet.
    doc = contract(cli, g)
    step = capability_command(only(doc, "issue-fix"))
    assert step.startswith("loopx issue-fix handoff --run-id ")
    assert as_agent(cli, only(doc, "todo claim")).code == 0
    r = as_agent(cli, step + " --root-cause 'add() used subtraction' --json")
    assert r.code == 0, r
    packet = r.json["packet"]
    assert open(r.json["packet_path"]).read() == packet
    assert r.json["packet_path"].startswith(str(project.resolve() / ".git"))
    for needle in ("add(2, 3) returns -1 instead of 5", "add() used subtraction", "calc.py | 2 +-",
                   s["reproduction"]["evidence_id"], s["verification"]["evidence_id"], "AssertionError"):
        assert needle in packet, needle
    finish_turn(cli, doc)
    assert state(cli, g)["phase"] == "publish"

    # Publishing waits for the user: no publish action in any contract, the gate in user_channel.
    doc = contract(cli, g)
    assert doc["decision"] == "ask_user"
    assert not any("publish" in a for a in actions(doc))
    assert any(out["publish_gate"] in a and "approve" in a
               for a in doc["interaction_contract"]["user_channel"]["next_user_actions"])
    assert git(project.parent / "origin.git", "branch", "--list") == ""

    r = cli("gate", "approve", "--goal-id", g, "--gate-id", out["publish_gate"], "--json")
    assert r.code == 0, r
    doc = contract(cli, g)
    assert doc["decision"] == "run"
    run4 = doc["interaction_contract"]["run_id"]
    publish = only(doc, "--action publish")
    assert publish == f"loopx exec --run-id {run4} --agent agent --action publish"
    assert as_agent(cli, only(doc, "todo claim")).code == 0
    r = as_agent(cli, publish + " --json")
    assert r.code == 0, r
    finish_turn(cli, doc)
    head = git(project, "rev-parse", "HEAD")
    assert git(project.parent / "origin.git", "rev-parse", f"refs/heads/{out['branch']}") == head
    s = state(cli, g)
    assert s["phase"] == "published" and s["published"]["commit"] == head
    assert set(s["todo_status"].values()) == {"done"}

    kinds = [(e["kind"], (e["data"] or {}).get("step"), e["actor"]) for e in evidence(loopx_registry, g)
             if e["actor"] == "capability:issue_fix"]
    assert kinds == [("test", "reproduce", "capability:issue_fix"), ("test", "verify", "capability:issue_fix"),
                     ("test", "verify", "capability:issue_fix"), ("handoff", "handoff", "capability:issue_fix"),
                     ("publish", "publish", "capability:issue_fix")]

    # The ledger rebuilds exactly this state.
    from loopx import ledger

    with loopx_registry.read() as tx:
        now, events = ledger.snapshot(tx, g), ledger.events(tx, g)
    assert ledger.normalise(ledger.replayed_snapshot(events)) == ledger.normalise(now)


def test_a_fix_that_never_reproduced_is_refused(cli, tmp_path, loopx_registry):
    repo = make_project(tmp_path, code=FIXED)  # the test passes already: nothing to reproduce
    g = start(cli, repo)["goal_id"]
    doc = contract(cli, g)
    run = doc["interaction_contract"]["run_id"]

    for step in ("verify", "handoff"):
        r = as_agent(cli, f"loopx issue-fix {step} --run-id {run} --json")
        assert r.code == 2 and r.json["error"]["code"] == "not_reproduced", r
    assert evidence(loopx_registry, g) == []

    r = as_agent(cli, f"loopx issue-fix reproduce --run-id {run} --json")
    assert r.code == 1, r
    assert r.json["reproduced"] is False and r.json["phase"] == "reproduce"
    # The failed step's own record (kind command, by the core), and the capability's evidence.
    ev, step_ev = evidence(loopx_registry, g)
    assert (step_ev["kind"], step_ev["actor"], step_ev["data"]["exit_code"]) == ("command", "core", 1)
    assert ev["data"]["passed"] is True and "did NOT reproduce" in ev["summary"]

    # Green without red stays refused, however often it is tried.
    r = as_agent(cli, f"loopx issue-fix verify --run-id {run} --json")
    assert r.json["error"]["code"] == "not_reproduced"
    s = state(cli, g)
    assert s["phase"] == "reproduce" and s["attempts"] == {"reproduce": 1, "verify": 0}
    assert "reproduction" not in s and s["todo_status"]["reproduce"] == "open"
    assert capability_command(only(contract(cli, g), "issue-fix")) == f"loopx issue-fix reproduce --run-id {run}"


def test_a_pass_on_unchanged_code_is_flaky_not_fixed(cli, tmp_path, loopx_registry):
    repo = make_project(tmp_path)
    flag = tmp_path / "ran-once"
    # Fails the first time, passes after: a flaky test, with no change to the code.
    flaky = f"test -e {shlex.quote(str(flag))} || {{ touch {shlex.quote(str(flag))}; exit 1; }}"
    g = start(cli, repo, command=flaky)["goal_id"]
    run = contract(cli, g)["interaction_contract"]["run_id"]
    assert as_agent(cli, f"loopx issue-fix reproduce --run-id {run}").code == 0
    r = as_agent(cli, f"loopx issue-fix verify --run-id {run} --json")
    assert r.code == 1, r
    assert r.json["test"]["passed"] is True
    assert r.json["verified"] is False and r.json["reason"] == "unchanged"
    assert state(cli, g)["phase"] == "fix"


def test_steps_are_refused_under_a_stale_contract_and_run_nothing(cli, project, tmp_path):
    marker = tmp_path / "test-ran"
    g = start(cli, project, command=f"touch {shlex.quote(str(marker))}; exit 1")["goal_id"]
    run = contract(cli, g)["interaction_contract"]["run_id"]
    # A user lowers the budget: the goal's fingerprint changes, the contract is stale.
    assert cli("quota", "set", "--goal-id", g, "--max-turns", "5").code == 0
    r = as_agent(cli, f"loopx issue-fix reproduce --run-id {run} --json")
    assert r.code == 2 and r.json["error"]["code"] == "contract_stale", r
    assert not marker.exists()
    assert state(cli, g)["attempts"]["reproduce"] == 0
    # A fresh contract (the same run, renewed) lets the step run.
    assert contract(cli, g)["interaction_contract"]["run_id"] == run
    r = as_agent(cli, f"loopx issue-fix reproduce --run-id {run} --json")
    assert r.code == 0 and marker.exists()


def test_publish_is_refused_before_approval_even_when_run_directly(cli, project):
    out = start(cli, project)
    g = out["goal_id"]
    run = contract(cli, g)["interaction_contract"]["run_id"]
    r = as_agent(cli, f"loopx exec --run-id {run} --action publish --json")
    assert r.code == 2 and r.json["error"]["code"] == "action_not_allowed", r
    r = as_agent(cli, f"loopx issue-fix publish --run-id {run} --json")
    assert r.code == 2 and r.json["error"]["code"] == "not_reproduced"  # nothing is even reproduced yet
    assert git(project.parent / "origin.git", "branch", "--list") == ""


def test_other_goals_get_nothing_from_issue_fix(cli):
    g = cli("project_prompt", "create", "--title", "plain goal", "--json").json["id"]
    assert cli("todo", "add", "--goal-id", g, "--text", "step").code == 0
    doc = contract(cli, g)
    assert not any("issue-fix" in a for a in actions(doc))
    r = cli("issue-fix", "show", "--goal-id", g, "--json")
    assert r.json["error"]["code"] == "issue_fix_error"


def test_disabling_the_plugin_removes_its_commands_not_the_core(tmp_path):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_REGISTRY"] = str(tmp_path / "reg.db")
    repo = make_project(tmp_path)

    def loopx(*args, **extra):
        p = subprocess.run([sys.executable, "-m", "loopx", *map(str, args)], capture_output=True, text=True,
                           env={**env, **extra}, timeout=120)
        return p

    p = loopx("issue-fix", "start", "--repo", repo, "--title", "t", "--issue-text", "x",
              "--test-command", TEST_COMMAND, "--json")
    assert p.returncode == 0, p.stderr
    g = json.loads(p.stdout)["goal_id"]
    assert "issue_fix" in loopx("plugins").stdout
    assert "issue_fix" in loopx("capabilities", "list").stdout

    off = {"LOOPX_DISABLE_PLUGINS": "issue_fix"}
    p = loopx("issue-fix", "show", "--goal-id", g, **off)
    assert p.returncode == 2 and "No such command 'issue-fix'" in p.stderr
    assert "issue_fix" not in loopx("plugins", **off).stdout
    assert "issue_fix" not in loopx("capabilities", "list", **off).stdout
    p = loopx("quota", "should-run", "--goal-id", g, "--json", **off)
    assert p.returncode == 0, p.stderr
    assert not any("issue-fix" in a for a in json.loads(p.stdout)["interaction_contract"]["cli_channel"]["next_cli_actions"])
    assert loopx("history", "--goal-id", g, **off).returncode == 0
    # Back on: the goal carries on where it was.
    p = loopx("issue-fix", "show", "--goal-id", g, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["phase"] == "reproduce"

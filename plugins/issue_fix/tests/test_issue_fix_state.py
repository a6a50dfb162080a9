"""Issue-Fix's state is versioned: a goal whose ``issue_fix`` namespace the dict-based code wrote
(no ``state_version``; older goals also without the keys added since) goes on after the change,
and its first step records the migrated shape and the version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from issue_fix_helpers import FAILING_ID, FIXED, TEST_COMMAND, as_agent, git, origin_of

#: The namespace as the dict-based Issue-Fix wrote it at ``start``, in the shape of its older
#: releases: no version, no fixed test plan (``runner``), no interpreter fingerprint, no refs
#: snapshot, no ``keep``, no ``git_common_dir``, and ``attempts`` without ``publish``. The
#: ``<...>`` strings are filled in from a goal started for the test (its worktree, todos, base).
OLD_AT_START = """{
  "allow_test_changes": false,
  "attempts": {"reproduce": 0, "verify": 0},
  "branch": {"base_commit": "<base_commit>", "base_tree": "<base_tree>", "name": "<branch>", "remote": "origin"},
  "goal_dir": "<goal_dir>",
  "issue": {"source": "text", "text": "add(2, 3) returns -1 instead of 5", "title": "add subtracts"},
  "log": [],
  "outputs": [],
  "phase": "reproduce",
  "publish": {"provider": "push", "remote": "origin"},
  "publish_gate": null,
  "repo": "<repo>",
  "report": null,
  "test_command": "<test_command>",
  "test_ids": [],
  "test_timeout": 60.0,
  "todos": {"fix": "<todo_fix>", "handoff": "<todo_handoff>", "publish": "<todo_publish>",
            "reproduce": "<todo_reproduce>", "verify": "<todo_verify>"},
  "user_checkout": {"branch": "main", "dirty": false, "dirty_paths": []},
  "worktree": "<worktree>"
}"""

#: A verification as releases before ``tested_tree`` wrote it (publish checks the tree it tested).
OLD_VERIFICATION = """{
  "commit": "<commit>", "evidence_id": "<evidence_id>", "run_id": "<run_id>", "tree": "<tree>",
  "passed": ["<failing>"], "ignored": []
}"""


def _fill(text: str, values: dict) -> dict:
    for key, value in values.items():
        text = text.replace(f"<{key}>", str(value))
    return json.loads(text)


def _namespace(reg, goal_id):
    from loopx import api

    return api.state.get(reg, goal_id, "issue_fix")


def _rewrite(reg, goal_id, raw: dict) -> None:
    """Replace the goal's namespace with ``raw``, as the capability (two transactions of the core's own)."""
    from loopx import api

    api.state.delete(reg, "issue_fix", goal_id, list(_namespace(reg, goal_id)))
    api.state.set(reg, "issue_fix", goal_id, raw)
    assert _namespace(reg, goal_id) == raw


def _step(cli, goal_id, *extra, expect=0):
    doc = cli("quota", "should-run", "--goal-id", goal_id, "--json", env={"LOOPX_ACTOR": "executor"}).json
    assert doc["decision"] == "run", doc
    lines = [a.split(" -- ", 1)[1] if " -- loopx " in a else a
             for a in doc["interaction_contract"]["cli_channel"]["next_cli_actions"]]
    [command] = [a for a in lines if "loopx issue-fix " in a]
    r = as_agent(cli, command + "".join(f" {x}" for x in extra) + " --json")
    assert r.code == expect, r
    [finish] = [a for a in lines if "loopx run finish" in a]
    assert as_agent(cli, finish).code == 0
    return r


@pytest.mark.slow
def test_a_goal_the_dict_based_code_wrote_goes_on_and_is_migrated(cli, project, loopx_registry):
    r = cli("issue-fix", "start", "--repo", project, "--title", "add subtracts", "--issue-text",
            "add(2, 3) returns -1 instead of 5", "--test-command", TEST_COMMAND, "--json")
    assert r.code == 0, r
    out = r.json
    g = out["goal_id"]
    now = _namespace(loopx_registry, g)
    assert now["state_version"] == 1  # what this code writes
    old = _fill(OLD_AT_START, {"repo": out["repo"], "worktree": out["worktree"], "goal_dir": now["goal_dir"],
                               "branch": out["branch"], "base_commit": out["base_commit"],
                               "base_tree": now["branch"]["base_tree"], "test_command": TEST_COMMAND,
                               **{f"todo_{k}": v for k, v in out["todos"].items()}})
    _rewrite(loopx_registry, g, old)

    # `show` reads the old shape: the keys it held, migrated (attempts gain publish), no version.
    shown = cli("issue-fix", "show", "--goal-id", g, "--json").json
    assert shown["phase"] == "reproduce" and shown["attempts"] == {"publish": 0, "reproduce": 0, "verify": 0}
    assert "state_version" not in shown and "runner" not in shown and "refs" not in shown

    # Red: the tests are planned at the step (no plan was fixed at start), the failing test found.
    r = _step(cli, g)
    assert r.json["reproduced"] is True and r.json["failing"] == [FAILING_ID]
    stored = _namespace(loopx_registry, g)
    # The first write records the version and what the migration filled in.
    assert stored["state_version"] == 1 and stored["runner_fixed"] is False
    assert stored["attempts"] == {"publish": 0, "reproduce": 1, "verify": 0}
    assert stored["reproduction"]["failing"] == [FAILING_ID] and stored["phase"] == "fix"

    # Green, then the hand-off and its gate.
    Path(out["worktree"], "calc.py").write_text(FIXED)
    r = _step(cli, g)
    assert r.json["verified"] is True, r
    commit = r.json["commit"]
    r = _step(cli, g, "--root-cause", "subtraction")
    gate_id = r.json["gate_id"]

    # The verification as an older release wrote it (no tested_tree), the version gone again.
    stored = _namespace(loopx_registry, g)
    ver = stored["verification"]
    older = {k: v for k, v in stored.items() if k not in ("state_version", "runner_fixed")}
    older["verification"] = _fill(OLD_VERIFICATION, {"commit": commit, "evidence_id": ver["evidence_id"],
                                                     "run_id": ver["run_id"], "tree": ver["tree"],
                                                     "failing": FAILING_ID})
    _rewrite(loopx_registry, g, older)

    # Publish checks the commit holds the tree verify tested: the migration says it is `tree`.
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate_id).code == 0
    r = _step(cli, g)
    assert r.json["remote_sha"] == commit
    assert git(origin_of(project), "rev-parse", f"refs/heads/{out['branch']}") == commit
    stored = _namespace(loopx_registry, g)
    assert stored["state_version"] == 1 and stored["phase"] == "published"
    assert stored["verification"]["tested_tree"] == ver["tree"]
    shown = cli("issue-fix", "show", "--goal-id", g, "--json").json
    assert shown["status"] == "closed" and shown["published"]["commit"] == commit


def test_what_start_writes_reads_back_as_written(cli, project, loopx_registry):
    # The stored namespace is the dict the code before the attrs classes wrote: the same keys
    # (plus the version) and values, sorted as the core stores them, shown as stored.
    r = cli("issue-fix", "start", "--repo", project, "--title", "add subtracts", "--issue-text", "x",
            "--test-command", TEST_COMMAND, "--json")
    g = r.json["goal_id"]
    stored = _namespace(loopx_registry, g)
    assert set(stored) == {"allow_test_changes", "attempts", "branch", "environment", "environment_signature",
                           "git_common_dir", "goal_dir", "issue", "keep", "log", "outputs", "phase", "publish",
                           "publish_gate", "refs", "repo", "report", "runner", "test_command", "test_ids",
                           "test_timeout", "todos", "user_checkout", "worktree", "state_version"}
    shown = cli("issue-fix", "show", "--goal-id", g, "--json").json
    assert {k: shown[k] for k in stored if k != "state_version"} == \
        {k: v for k, v in stored.items() if k != "state_version"}


def test_should_run_builds_an_issue_fix_contract_without_cattrs(cli, project):
    # `quota should-run` runs before every agent turn: the contract reads the state without
    # importing cattrs (or generating its code), as the core's should-run does (issue 38).
    import os
    import subprocess
    import sys

    r = cli("issue-fix", "start", "--repo", project, "--title", "add subtracts", "--issue-text", "x",
            "--test-command", TEST_COMMAND, "--json")
    g = r.json["goal_id"]
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", "quota", "should-run", "--goal-id", g,
                        "--json"], env={**os.environ, "LOOPX_ACTOR": "executor"}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "loopx issue-fix reproduce --run-id " in p.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")]
    assert "loopx_issue_fix.state" in imported
    assert not [m for m in imported if m.split(".")[0] == "cattrs"]

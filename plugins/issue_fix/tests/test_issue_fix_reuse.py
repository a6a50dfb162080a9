"""One base run per base: a later goal on the same base, command and environment takes over the
earlier red reproduction's complete results (and its bytecode) instead of running the suite again,
and only what the registry vouches for is ever taken over."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from issue_fix_helpers import FAILING_ID, FIXED, TEST_COMMAND, WRONG, git, make_project
from test_issue_fix import start, state, step


def reproduce(cli, repo, command=TEST_COMMAND):
    out = start(cli, repo, command=command)
    r, _ = step(cli, out["goal_id"])
    assert r.json["reproduced"] is True, r
    return out["goal_id"], Path(out["worktree"]), r.json


def results_file(cli, g) -> Path:
    s = state(cli, g)
    return Path(s["goal_dir"], "results", f"{s['reproduction']['evidence_id']}.json")


@pytest.mark.slow
def test_a_later_goal_on_the_same_base_reuses_the_red_base_run_and_still_verifies_for_real(cli, project):
    first, _wt, ran = reproduce(cli, project)
    assert ran["test"].get("reused") is None
    earlier = state(cli, first)["reproduction"]
    r = cli("issue-fix", "close", "--goal-id", first, "--json")
    assert r.code == 0, r

    g, wt, again = reproduce(cli, project)
    assert again["test"]["reused"] == {"goal_id": first, "evidence_id": earlier["evidence_id"]}, again["test"]
    assert again["failing"] == [FAILING_ID]
    s = state(cli, g)
    assert s["reproduction"]["results_sha256"] == earlier["results_sha256"]
    assert results_file(cli, g).read_bytes() == results_file(cli, first).read_bytes()
    # Verify still runs the candidate: a wrong fix fails, the right one passes with the base's bytecode.
    (wt / "calc.py").write_text(WRONG)
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "test_failed", r
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r
    used = r.json["test"]["bytecode"]
    assert used["copied"] >= 1 and used["refused"] == 0, used


@pytest.mark.slow
def test_a_new_base_starts_warm_with_an_earlier_bases_bytecode_of_unchanged_files(cli, project):
    reproduce(cli, project)
    (project / "NOTES.txt").write_text("a file no test reads\n")
    git(project, "add", "NOTES.txt")
    git(project, "commit", "-qm", "notes")
    g, wt, ran = reproduce(cli, project)  # a new base: its run runs, with the earlier base's bytecode
    assert ran["test"].get("reused") is None, ran["test"]
    assert ran["test"]["bytecode"]["copied"] >= 1 and ran["test"]["bytecode"]["refused"] == 0, ran["test"]
    (wt / "calc.py").write_text(WRONG)
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "test_failed", r
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r


@pytest.mark.slow
def test_an_earlier_results_file_that_changed_is_not_reused(cli, project):
    first, _wt, _ = reproduce(cli, project)
    path = results_file(cli, first)
    body = json.loads(path.read_text())
    body["cases"][FAILING_ID]["status"] = "passed"  # .git is writable by an agent
    path.write_text(json.dumps(body))
    g, _wt2, again = reproduce(cli, project)
    assert again["test"].get("reused") is None, again["test"]
    assert again["failing"] == [FAILING_ID]
    assert state(cli, g)["reproduction"]["results_sha256"] == hashlib.sha256(results_file(cli, g).read_bytes()).hexdigest()
    # The fresh run is the base's run from now on.
    _g, _wt3, third = reproduce(cli, project)
    assert third["test"]["reused"]["goal_id"] == g, third["test"]


@pytest.mark.slow
def test_a_pointer_to_another_bases_run_is_not_followed(cli, project):
    first, _wt, _ = reproduce(cli, project)
    other, _wt2, _ = reproduce(cli, project, command=TEST_COMMAND + " -p no:doctest")
    pointers = list(Path(state(cli, first)["goal_dir"]).parent.glob("base/*/latest.json"))
    assert len(pointers) == 2
    forged = json.dumps({"goal_id": other, "evidence_id": state(cli, other)["reproduction"]["evidence_id"]})
    for p in pointers:  # every base now "points" at the other command's run
        p.write_text(forged)
    _g, _wt3, again = reproduce(cli, project)
    assert again["test"].get("reused") is None, again["test"]
    # For the other command's own base the same pointer is right, and followed.
    _g, _wt4, theirs = reproduce(cli, project, command=TEST_COMMAND + " -p no:doctest")
    assert theirs["test"]["reused"]["goal_id"] == other, theirs["test"]


@pytest.mark.slow
def test_a_package_installed_since_the_base_run_means_the_base_runs_again(cli, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p, "pytest").is_dir()][0]
    (site / "deps.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    repo = make_project(tmp_path)
    command = f"{venv}/bin/python -m pytest -q"
    reproduce(cli, repo, command=command)
    _g, _wt, same = reproduce(cli, repo, command=command)
    assert same["test"]["reused"] is not None, same["test"]
    (site / "newdep").mkdir()  # no start-up file changed: only what is installed
    (site / "newdep" / "__init__.py").write_text("")
    _g, _wt, after = reproduce(cli, repo, command=command)
    assert after["test"].get("reused") is None, after["test"]

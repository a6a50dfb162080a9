"""How many git processes an Issue-Fix step starts (issue 23: the fixed cost of a step).

Each git process costs a few milliseconds of CPU on every step, beside the test run itself; the
steps ask git only what they need, batched (one ``for-each-ref`` for the refs and where they are
checked out, one diff for both test-change checks, one diff for the packet's numstat, stat and
patch). Counted with a ``git`` on ``PATH`` that logs each call and runs the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from issue_fix_helpers import FIXED, as_agent
from test_issue_fix import contract, finish, only, start

#: What each step may start at most: reproduce (its commit, candidate tree, export of the tree,
#: refs, the remote's refs) and verify (the same, plus the ignored files, the one diff of the
#: test-change checks, committing and moving the branch, the packet's diff); each also one
#: ``git config`` for the filter drivers the repository defines and the user's ssh command and
#: credential helpers (issue 34: LoopX's git takes no program from the repository).
MAX_GIT = {"reproduce": 9, "verify": 15}


def _shim(tmp_path: Path) -> tuple[str, Path]:
    """A directory holding a ``git`` that logs one ``CALL <args>`` line per call, then execs the real git."""
    real = shutil.which("git")
    assert real
    bin_dir, log = tmp_path / "shim-bin", tmp_path / "git-calls.log"
    bin_dir.mkdir()
    shim = bin_dir / "git"
    shim.write_text(f"#!/bin/sh\nprintf 'CALL %s\\n' \"$*\" >> '{log}'\nexec '{real}' \"$@\"\n")
    shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", log


def _calls(log: Path) -> list[str]:
    if not log.exists():
        return []
    calls = [line[5:] for line in log.read_text().splitlines() if line.startswith("CALL ")]
    log.unlink()
    return calls


def _step(cli, goal_id, path: str, log: Path, expect=0):
    doc = contract(cli, goal_id)
    r = as_agent(cli, only(doc, "loopx issue-fix ") + " --json", PATH=path)
    assert r.code == expect, r
    calls = _calls(log)
    finish(cli, doc)
    return r, calls


@pytest.mark.slow
def test_reproduce_and_verify_start_few_git_processes_and_the_packet_diff_is_gits(cli, project, tmp_path):
    path, log = _shim(tmp_path)
    out = start(cli, project)
    g, wt = out["goal_id"], Path(out["worktree"])
    _calls(log)

    r, calls = _step(cli, g, path, log)
    assert r.json["reproduced"] is True
    assert 0 < len(calls) <= MAX_GIT["reproduce"], calls

    (wt / "calc.py").write_text(FIXED)
    r, calls = _step(cli, g, path, log)
    assert r.json["verified"] is True, r
    assert 0 < len(calls) <= MAX_GIT["verify"], "\n".join(c.split(" -C ", 1)[-1][-150:] for c in calls)
    # Asked once, not once per question.
    assert sum(" diff " in f" {c} " for c in calls) == 2, calls
    assert not any(c.split(" -C ", 1)[-1].split()[1:3] == ["worktree", "list"] for c in calls), calls

    # The packet's figures are what git says when asked each on its own.
    commit, base = r.json["commit"], out["base_commit"]
    plain = ("--no-ext-diff", "--no-textconv", "--no-renames")
    diff = r.json["diff"]

    def alone(*args):
        return subprocess.run(["git", "-C", str(project), "diff", *args, *plain, base, commit, "--"],
                              capture_output=True, text=True, check=True).stdout.rstrip("\n")

    assert diff["stat"] == alone("--stat") and diff["stat"].startswith(" calc.py |")
    numstat = alone("--numstat").splitlines()
    assert [f"{f['insertions']}\t{f['deletions']}\t{f['path']}" for f in diff["files"]] == numstat
    assert diff["files_changed"] == 1 and diff["insertions"] == 1 and diff["deletions"] == 1

    r, _ = _step(cli, g, path, log)
    patch = alone("--binary")
    assert patch and patch in r.json["packet"]

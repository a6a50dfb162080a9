"""The few git questions Issue-Fix asks of the repository it works in, through the git CLI.

Every call runs ``git -C REPO ...`` with a fixed environment (no pager, no prompts, C locale)
and turns a failure into ``LoopxError("issue_fix_error", ...)`` naming the git command.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from loopx.api import LoopxError

GIT_TIMEOUT_SECONDS = 120


def _env() -> dict:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "LC_ALL": "C"})
    return env


def git(repo: str | Path, *args: str, check: bool = True) -> str:
    """Run ``git -C repo args...`` and return its stdout (stripped of the final newline)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, env=_env(),
            timeout=GIT_TIMEOUT_SECONDS, errors="replace",
        )
    except FileNotFoundError:
        raise LoopxError("issue_fix_error", "git is not installed (Issue-Fix needs the git command)") from None
    except subprocess.TimeoutExpired:
        raise LoopxError("issue_fix_error", f"git {' '.join(args)} took longer than {GIT_TIMEOUT_SECONDS}s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise LoopxError("issue_fix_error",
                         f"git {' '.join(args)} failed in {repo}: {detail[-1] if detail else proc.returncode}")
    return proc.stdout.rstrip("\n")


def toplevel(path: str | Path) -> str:
    """The absolute root of the git working tree holding ``path`` (``issue_fix_error`` if none)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise LoopxError("issue_fix_error", f"--repo {path}: no such directory")
    try:
        return git(p.resolve(), "rev-parse", "--show-toplevel")
    except LoopxError:
        raise LoopxError("issue_fix_error", f"--repo {path} is not inside a git working tree") from None


def head(repo: str) -> str:
    """The commit ``HEAD`` points at (``issue_fix_error`` for a repository without commits)."""
    out = git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if not out:
        raise LoopxError("issue_fix_error", f"{repo} has no commits yet: commit the code the issue is about first")
    return out


def current_branch(repo: str) -> str | None:
    """The checked-out branch, or ``None`` on a detached HEAD."""
    out = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return out or None


def branch_exists(repo: str, name: str) -> bool:
    """Whether a local branch ``name`` exists."""
    return bool(git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}", check=False))


def check_branch_name(repo: str, name: str) -> str:
    """``name`` if git accepts it as a branch name, else ``invalid_argument``."""
    if not name or git(repo, "check-ref-format", "--branch", name, check=False) == "":
        raise LoopxError("invalid_argument", f"--branch: {name!r} is not a valid git branch name")
    return name


def switch_new_branch(repo: str, name: str) -> None:
    """Create branch ``name`` at ``HEAD`` and check it out (uncommitted changes come along)."""
    git(repo, "switch", "--quiet", "-c", name)


def undo_new_branch(repo: str, name: str, previous: str | None, base: str) -> None:
    """Best-effort undo of :func:`switch_new_branch` after a failed registration."""
    git(repo, "switch", "--quiet", previous, check=False) if previous else git(
        repo, "switch", "--quiet", "--detach", base, check=False)
    git(repo, "branch", "--quiet", "-D", name, check=False)


def git_dir(repo: str) -> Path:
    """The repository's ``.git`` directory (absolute)."""
    return Path(git(repo, "rev-parse", "--absolute-git-dir"))


def diff_stat(repo: str, base: str) -> dict:
    """What changed since ``base``: committed and uncommitted edits, and new untracked files.

    Returns ``{"base", "commit", "files": [{"path", "insertions", "deletions"}], "files_changed",
    "insertions", "deletions", "untracked": [path], "stat": TEXT}`` where ``stat`` is git's own
    ``--stat`` rendering (the form reviewers know).
    """
    files, ins, dels = [], 0, 0
    for line in git(repo, "diff", "--numstat", base, "--").splitlines():
        added, removed, path = line.split("\t", 2)
        # Binary files show "-" for both counts.
        a = int(added) if added.isdigit() else 0
        d = int(removed) if removed.isdigit() else 0
        files.append({"path": path, "insertions": a, "deletions": d})
        ins, dels = ins + a, dels + d
    untracked = [p for p in git(repo, "ls-files", "--others", "--exclude-standard").splitlines() if p]
    return {
        "base": base,
        "commit": head(repo),
        "files": files,
        "files_changed": len(files) + len(untracked),
        "insertions": ins,
        "deletions": dels,
        "untracked": untracked,
        "stat": git(repo, "diff", "--stat", base, "--"),
    }



def worktree_fingerprint(repo: str) -> str:
    """A hash of the code as it stands: ``HEAD``, uncommitted edits and untracked files.

    Two equal fingerprints mean nothing changed in between, so a test that failed and then
    passed on the same fingerprint is flaky, not fixed.
    """
    import hashlib

    h = hashlib.sha256()
    h.update(head(repo).encode())
    try:
        diff = subprocess.run(["git", "-C", repo, "diff", "--binary", "HEAD", "--"], capture_output=True,
                              env=_env(), timeout=GIT_TIMEOUT_SECONDS).stdout
    except subprocess.TimeoutExpired:
        raise LoopxError("issue_fix_error", f"git diff took longer than {GIT_TIMEOUT_SECONDS}s") from None
    h.update(diff)
    for path in sorted(p for p in git(repo, "ls-files", "--others", "--exclude-standard").splitlines() if p):
        h.update(b"\0untracked\0" + path.encode())
        try:
            h.update(hashlib.sha256(Path(repo, path).read_bytes()).digest())
        except OSError:
            pass
    return h.hexdigest()


def push(repo: str, remote: str, branch: str) -> str:
    """Push ``branch`` to ``remote`` and set its upstream; returns git's report."""
    try:
        proc = subprocess.run(
            ["git", "-C", repo, "push", "--set-upstream", remote, f"refs/heads/{branch}:refs/heads/{branch}"],
            capture_output=True, text=True, env=_env(), timeout=GIT_TIMEOUT_SECONDS, errors="replace",
        )
    except subprocess.TimeoutExpired:
        raise LoopxError("issue_fix_error", f"git push to {remote} took longer than {GIT_TIMEOUT_SECONDS}s") from None
    report = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        last = report.splitlines()[-1] if report else f"exit {proc.returncode}"
        raise LoopxError("issue_fix_error", f"git push {remote} {branch} failed: {last}")
    return report

"""The git questions and changes Issue-Fix makes, through the git CLI.

Local plumbing runs ``git -C REPO ...`` with a fixed environment (no pager, no prompts, C
locale) and turns a failure into ``LoopxError("issue_fix.git_failed", ...)`` naming the git command.
``git push`` talks to other machines, so it runs through the core's ``run_command`` (its own
process group, killed whole at the time-out).

The user's checkout is only ever read (``HEAD``, ``status``); every change happens in the
goal's own worktree, a ``git worktree`` under ``<git-common-dir>/loopx-issue-fix/<goal>/``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from loopx.api import LoopxError

GIT_TIMEOUT_SECONDS = 120
#: Who LoopX's own commits are by.
IDENTITY = {"GIT_AUTHOR_NAME": "LoopX Issue-Fix", "GIT_AUTHOR_EMAIL": "issue-fix@loopx.invalid",
            "GIT_COMMITTER_NAME": "LoopX Issue-Fix", "GIT_COMMITTER_EMAIL": "issue-fix@loopx.invalid"}
#: Never code: byte-code and test-runner caches (on top of the repository's own ignore rules).
EXCLUDES = "__pycache__/\n*.py[cod]\n.pytest_cache/\n.coverage\n.coverage.*\n.tox/\n.nox/\n.mypy_cache/\n"


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "LC_ALL": "C"})
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(key, None)
    env.update(extra or {})
    return env


def git(repo: str | Path, *args: str, check: bool = True, env: dict | None = None, raw: bool = False):
    """Run ``git -C repo args...``; its stdout (stripped of the final newline, or bytes if ``raw``)."""
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=_env(env),
                              timeout=GIT_TIMEOUT_SECONDS)
    except FileNotFoundError:
        raise LoopxError("issue_fix.git_failed", "git is not installed (Issue-Fix needs the git command)") from None
    except subprocess.TimeoutExpired:
        raise LoopxError("issue_fix.git_failed", f"git {' '.join(args)} took longer than {GIT_TIMEOUT_SECONDS}s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        raise LoopxError("issue_fix.git_failed",
                         f"git {' '.join(args)} failed in {repo}: {detail[-1] if detail else proc.returncode}")
    if raw:
        return proc.stdout
    return proc.stdout.decode("utf-8", "replace").rstrip("\n")


def toplevel(path: str | Path) -> str:
    """The absolute root of the git working tree holding ``path`` (``issue_fix.not_a_repository`` if none)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise LoopxError("issue_fix.not_a_repository", f"--repo {path}: no such directory")
    try:
        return git(p.resolve(), "rev-parse", "--show-toplevel")
    except LoopxError:
        raise LoopxError("issue_fix.not_a_repository", f"--repo {path} is not inside a git working tree") from None


def commit_of(repo: str, rev: str = "HEAD") -> str:
    """The commit ``rev`` names: ``issue_fix.not_a_repository`` for a repository without commits,
    ``invalid_argument`` when ``rev`` (``--base``) is not a commit."""
    out = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not out:
        if rev == "HEAD":
            raise LoopxError("issue_fix.not_a_repository", f"{repo} has no commits yet: commit the code the issue is about first")
        raise LoopxError("invalid_argument", f"--base {rev!r} is not a commit in {repo}")
    return out


def tree_of(repo: str, rev: str) -> str:
    """The tree hash of commit ``rev``."""
    return git(repo, "rev-parse", f"{rev}^{{tree}}")


def current_branch(repo: str) -> str | None:
    """The checked-out branch, or ``None`` on a detached HEAD."""
    return git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False) or None


def branch_exists(repo: str, name: str) -> bool:
    """Whether a local branch ``name`` exists."""
    return bool(git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}", check=False))


def check_branch_name(repo: str, name: str) -> str:
    """``name`` if git accepts it as a branch name, else ``invalid_argument``."""
    if not name or git(repo, "check-ref-format", "--branch", name, check=False) == "":
        raise LoopxError("invalid_argument", f"--branch: {name!r} is not a valid git branch name")
    return name


def common_dir(repo: str) -> Path:
    """The repository's shared ``.git`` directory (absolute; the same from every worktree)."""
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def dirty_paths(repo: str, limit: int = 50) -> list[str]:
    """Paths with uncommitted changes or untracked files in ``repo`` (at most ``limit``)."""
    out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=normal", raw=True)
    paths = [e[3:].decode("utf-8", "replace") for e in out.split(b"\0") if len(e) > 3]
    return paths[:limit]


def add_worktree(repo: str, path: Path, branch: str, base: str) -> None:
    """Create ``branch`` at ``base`` checked out in a new worktree at ``path``.

    The user's checkout (its HEAD, index and files) is not touched.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(path), base)
    (path.parent / "exclude").write_text(EXCLUDES)


def remove_worktree(repo: str, path: Path, branch: str) -> None:
    """Best-effort undo of :func:`add_worktree` after a failed registration."""
    git(repo, "worktree", "remove", "--force", str(path), check=False)
    git(repo, "branch", "--quiet", "-D", branch, check=False)


def _excludes(worktree: str) -> list[str]:
    return ["-c", f"core.excludesFile={Path(worktree).parent / 'exclude'}"]


def untracked(worktree: str) -> dict[str, str]:
    """``{path: content sha256}`` of the untracked, not ignored files in the worktree."""
    import hashlib

    out = git(worktree, *_excludes(worktree), "ls-files", "-z", "--others", "--exclude-standard", raw=True)
    found = {}
    for raw in out.split(b"\0"):
        if not raw:
            continue
        path = raw.decode("utf-8", "replace")
        try:
            found[path] = hashlib.sha256(Path(worktree, path).read_bytes()).hexdigest()
        except OSError:
            found[path] = "unreadable"
    return found


def candidate_tree(worktree: str, outputs: list[str]) -> str:
    """The tree hash of the code as it stands in the worktree: tracked edits and new files.

    Built in a private index, so the worktree's own index is left alone. Files the test
    command itself wrote (``outputs``: reports, caches) and ignored files are not code.
    """
    index = Path(worktree).parent / "candidate.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        git(worktree, "read-tree", "HEAD", env=env)
        git(worktree, *_excludes(worktree), "add", "--all", "--", ".", env=env)
        if outputs:
            git(worktree, "rm", "--cached", "--quiet", "--ignore-unmatch", "-r", "--", *outputs, env=env)
        return git(worktree, "write-tree", env=env)
    finally:
        index.unlink(missing_ok=True)


def commit_tree(worktree: str, tree: str, parent: str, message: str) -> str:
    """A new commit by LoopX of ``tree`` on ``parent``; its sha (no ref moves)."""
    return git(worktree, "commit-tree", tree, "-p", parent, "-m", message, env=IDENTITY)


def move_branch(worktree: str, branch: str, commit: str, expected: str) -> None:
    """Point ``branch`` (checked out in ``worktree``) at ``commit``; the index follows, files stay."""
    git(worktree, "update-ref", "-m", "issue-fix verify", f"refs/heads/{branch}", commit, expected)
    git(worktree, "reset", "--quiet")


def changed_paths(repo: str, a: str, b: str, paths: list[str] | None = None) -> list[str]:
    """Paths that differ between two trees/commits (within ``paths`` when given)."""
    out = git(repo, "diff", "--name-only", "-z", "--no-renames", a, b, "--", *(paths or []), raw=True)
    return [p.decode("utf-8", "replace") for p in out.split(b"\0") if p]


def diff(repo: str, a: str, b: str) -> dict:
    """What changed from ``a`` to ``b`` (commits or trees): the full patch, numstat and stat."""
    files, ins, dels = [], 0, 0
    for line in git(repo, "diff", "--numstat", "--no-renames", a, b, "--").splitlines():
        added, removed, path = line.split("\t", 2)
        x = int(added) if added.isdigit() else 0  # binary files show "-"
        y = int(removed) if removed.isdigit() else 0
        files.append({"path": path, "insertions": x, "deletions": y})
        ins, dels = ins + x, dels + y
    return {"files": files, "files_changed": len(files), "insertions": ins, "deletions": dels,
            "stat": git(repo, "diff", "--stat", "--no-renames", a, b, "--"),
            "patch": git(repo, "diff", "--no-renames", "--binary", a, b, "--")}


def push(worktree: str, remote: str, commit: str, branch: str, timeout: float) -> dict:
    """Push exactly ``commit`` to ``refs/heads/<branch>`` on ``remote``; then read back what it holds.

    Returns ``{"report", "remote_sha", "duration_seconds"}``; ``issue_fix.publish_failed`` when git fails
    or the remote does not hold ``commit`` afterwards.
    """
    from loopx.api import run_command

    env = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    # Outside the turn's confinement: the push is LoopX's, after a user approved it, and the
    # remote may be anywhere (the hooks and config git reads here are read-only to the agent).
    res = run_command(["git", "-C", worktree, "push", "--porcelain", remote, f"{commit}:refs/heads/{branch}"],
                      env=env, timeout=timeout, confine=False)
    report = res["output_tail"].strip()
    if res["timed_out"]:
        raise LoopxError("issue_fix.publish_failed", f"git push to {remote} took longer than {timeout:g}s (killed)")
    if res["exit_code"] != 0:
        last = report.splitlines()[-1] if report else f"exit {res['exit_code']}"
        raise LoopxError("issue_fix.publish_failed", f"git push {remote} {branch} failed: {last}")
    back = run_command(["git", "-C", worktree, "ls-remote", remote, f"refs/heads/{branch}"], env=env,
                       timeout=timeout, confine=False)
    remote_sha = back["output_tail"].split()[0] if back["exit_code"] == 0 and back["output_tail"].split() else None
    if remote_sha != commit:
        raise LoopxError("issue_fix.publish_failed", f"after the push {remote} holds {remote_sha} for {branch}, not {commit}")
    return {"report": report[-2000:], "remote_sha": remote_sha, "duration_seconds": res["duration_seconds"]}

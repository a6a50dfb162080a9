"""A workspace per goal: where the goal's agent works, never the user's own checkout.

Each goal has a **project** (the user's directory: ``project-prompt create --project``, default
the creating user's directory; a goal created before projects were recorded takes the directory
of its first turn) and a **workspace** LoopX makes and owns, on demand, before a turn::

    <user data dir>/loopx/workspaces/<registry key>/<goal id>/    (or the path the user set)

* a git project gets a ``git worktree`` on a branch of its own, ``loopx/<goal id>``, from the
  project's ``HEAD`` plus its uncommitted and untracked files (not the ignored ones) as they
  were then, as one commit of LoopX's (:func:`_snapshot`): the base the diff is taken against;
* any other directory (or a repository without a commit yet) gets a copy (without ``.git``), whose base is recorded in a private git directory beside it
  (``<goal id>.base.git``, outside what a step may write), so both kinds diff the same way.

The turn runs the step in the workspace (:func:`for_turn`): the user's checkout is outside the
step's writable roots, and so is every git directory of the workspace. Results come back only as
a diff (:func:`diff`) the user applies (:func:`apply`) or throws away (:func:`discard`); the
diff names files the user's own tools run or read (:data:`RISKY`) as risky. All git runs through
:mod:`loopx.values.gitcmd` (no configuration, hook, filter or replace ref of the repository's choosing).
A capability that contributes its own workdir (Issue-Fix's worktree) keeps it: no workspace then.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile

from loopx.values import gitcmd
from loopx.values.errors import LoopxError
from loopx.store.queries import goals as q

#: Paths (relative to the project) that the user's own tools run or read: flagged in every diff.
RISKY = re.compile(r"(^|/)(\.claude|\.codex|\.vscode|\.idea|\.devcontainer|\.husky)(/|$)|(^|/)\.envrc$"
                   r"|(^|/)\.git[^/]*(/|$)|(^|/)\.mcp\.json$|(^|/)(GNU)?[Mm]akefile$|hooks"
                   r"|(^|/)\.github/workflows(/|$)")


def root() -> str:
    """Where every registry's workspaces live: ``<user data dir>/loopx/workspaces``."""
    from loopx.values.userdirs import data_dir

    return os.path.join(data_dir(), "workspaces")


def risky(path: str) -> bool:
    """Whether a changed file is one the user's own tools run or read (agent settings, hooks,
    git's files, ``.envrc``, Makefiles, CI workflows)."""
    return RISKY.search(path) is not None


def record(tx, goal_id: str) -> dict | None:
    """The goal's ``goal_workspaces`` row (project, root, path, branch, base, kind), or ``None``."""
    row = q.workspace_record(tx, goal_id)
    return dict(row) if row else None


def check_project(path: str) -> str:
    """``path`` as a project: an existing directory, made absolute (``invalid_argument`` otherwise)."""
    real = os.path.realpath(os.path.abspath(os.path.expanduser(path)))
    if not os.path.isdir(real):
        raise LoopxError("invalid_argument", f"--project {path}: no such directory")
    return real


def check_root(path: str, project: str | None) -> str:
    """``path`` as a goal's workspace: absolute, not inside the project nor holding it."""
    real = os.path.realpath(os.path.abspath(os.path.expanduser(path)))
    if project and (real == project or real.startswith(project.rstrip("/") + "/")
                    or project.startswith(real.rstrip("/") + "/")):
        raise LoopxError("invalid_argument", f"--workspace {path} overlaps the project {project}: "
                         "a workspace is never in the user's checkout")
    if os.path.exists(real) and (not os.path.isdir(real) or os.listdir(real)):
        raise LoopxError("invalid_argument", f"--workspace {path} exists and is not an empty directory")
    return real


def _path(tx, goal_id: str, rec: dict) -> str:
    if rec.get("root"):
        return rec["root"]
    from loopx.ledger.artifacts import registry_key

    return os.path.join(root(), registry_key(tx), goal_id)


def _top(project: str) -> str | None:
    """The top of the git work tree holding ``project``, or ``None`` for a plain directory."""
    proc = gitcmd.run(project, "rev-parse", "--show-toplevel", check=False)
    return proc.stdout.decode("utf-8", "replace").strip() or None if proc.returncode == 0 else None


def _common_dir(top: str) -> str:
    return os.path.realpath(os.path.join(top, gitcmd.out(top, "rev-parse", "--git-common-dir")))


def git_dir(rec: dict) -> str:
    """The git directory LoopX uses for the workspace: a worktree's own directory inside the
    project's repository (found from the repository's files, never from the workspace's ``.git``
    file), or the private base repository of a copy."""
    path = rec["path"]
    if rec["kind"] == "copy":
        return path.rstrip("/") + ".base.git"
    common = _common_dir(_top(rec["project"]) or rec["project"])
    want = os.path.join(path, ".git")
    names = os.listdir(os.path.join(common, "worktrees")) if os.path.isdir(os.path.join(common, "worktrees")) else []
    for name in sorted(names, key=lambda n: n != os.path.basename(path)):
        try:
            with open(os.path.join(common, "worktrees", name, "gitdir"), encoding="utf-8") as f:
                if os.path.realpath(f.read().strip()) == os.path.realpath(want):
                    return os.path.join(common, "worktrees", name)
        except OSError:
            continue
    raise LoopxError("workspace_missing", f"{path} is no longer a worktree of {rec['project']}: "
                     "`loopx workspace discard` and the next turn makes a new one")


def _make(path: str, project: str, goal_id: str) -> dict:
    """Create the workspace at ``path`` for ``project``; ``{kind, branch, base}``."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    top = _top(project)
    if top is not None:
        head = gitcmd.run(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        base = head.stdout.decode().strip()
        if head.returncode != 0 or not base:
            top = None  # a repository without commits: no HEAD to branch from, so a copy
    if top is not None:
        branch = f"loopx/{goal_id}"
        gitdir = _common_dir(top)
        base = _snapshot(top, base)
        gitcmd.run(top, "worktree", "prune", git_dir=gitdir)
        exists = gitcmd.run(top, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", git_dir=gitdir,
                            check=False).returncode == 0
        args = ["worktree", "add", "--quiet", path, branch] if exists else \
            ["worktree", "add", "--quiet", "-b", branch, path, base]
        gitcmd.run(top, *args, git_dir=gitdir, code="workspace_unavailable")
        if exists:
            base = gitcmd.out(top, "rev-parse", f"refs/heads/{branch}", git_dir=gitdir)
        return {"kind": "git", "branch": branch, "base": base}
    if project in ("/", os.path.realpath(os.path.expanduser("~"))):
        raise LoopxError("workspace_unavailable", f"{project} is not a project LoopX copies (your home or the root): "
                         "run the turn or worker with --workdir (or from) the project's directory")
    # Never a .git of the project's (the copy's base lives in a git directory of LoopX's own), and
    # never LoopX's own workspaces, when the project holds them.
    skip = {os.path.realpath(root()), os.path.realpath(path)}

    def ignore(d, names):
        return [n for n in names if (d == project and n == ".git") or os.path.realpath(os.path.join(d, n)) in skip]

    shutil.copytree(project, path, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    gd = path.rstrip("/") + ".base.git"
    shutil.rmtree(gd, ignore_errors=True)
    gitcmd.run(path, "init", "--quiet", "--bare", gd)
    gitcmd.run(path, "add", "-A", "--force", ".", git_dir=gd, work_tree=path)
    gitcmd.run(path, "commit", "--quiet", "--allow-empty", "--no-verify", "-m", "the project when the workspace was made",
               git_dir=gd, work_tree=path)
    return {"kind": "copy", "branch": None, "base": gitcmd.out(path, "rev-parse", "HEAD", git_dir=gd)}


def _snapshot(top: str, head: str) -> str:
    """A commit of the checkout as it is now: ``head`` plus its uncommitted and untracked files
    (not the ignored ones), or ``head`` itself when there are none. Made in a temporary index
    (a copy of the checkout's, for its stat cache); the checkout and its index are not touched."""
    gd = gitcmd.out(top, "rev-parse", "--absolute-git-dir")
    with tempfile.TemporaryDirectory(prefix="loopx-ws-") as tmp:
        index = os.path.join(tmp, "index")
        try:
            shutil.copyfile(gitcmd.out(top, "rev-parse", "--path-format=absolute", "--git-path", "index"), index)
        except OSError:
            gitcmd.run(top, "read-tree", head, git_dir=gd, work_tree=top, index_file=index)
        gitcmd.run(top, "add", "-A", "--", ".", git_dir=gd, work_tree=top, index_file=index)
        tree = gitcmd.out(top, "write-tree", git_dir=gd, work_tree=top, index_file=index)
    if tree == gitcmd.out(top, "rev-parse", f"{head}^{{tree}}", git_dir=gd):
        return head
    return gitcmd.out(top, "commit-tree", tree, "-p", head, "-m", "LoopX: the checkout's uncommitted work when the "
                      "workspace was made", git_dir=gd)


def ensure(registry, actor: str, goal_id: str, *, default_project: str) -> dict:
    """The goal's workspace, made now if it has none (or it was removed): the ``goal_workspaces``
    row plus ``workdir`` (where the agent starts: the project's place inside the workspace).

    A goal with no project yet takes ``default_project`` (the turn's directory) as its project.
    """
    with registry.read() as tx:
        rec = record(tx, goal_id) or {"project": None, "root": None, "path": None}
        path = _path(tx, goal_id, rec)
    if rec.get("path") and rec.get("project") and os.path.isdir(rec["path"]):
        return {**rec, "workdir": _workdir(rec)}  # every turn after the first: one read, one stat
    import fcntl

    # Two turns of one goal (parallel runs, two workers) make it once: the second waits, then finds it.
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path.rstrip("/") + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with registry.read() as tx:
            rec = record(tx, goal_id) or {"project": None, "root": None, "path": None}
        return _ensure_locked(registry, actor, goal_id, rec, path, default_project)


def _ensure_locked(registry, actor: str, goal_id: str, rec: dict, path: str, default_project: str) -> dict:
    changed = {}
    if not rec.get("project"):
        rec["project"] = changed["project"] = check_project(default_project)
    if not rec.get("path") or not os.path.isdir(rec["path"]):
        empty = os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
        if os.path.lexists(path) and not rec.get("path") and not empty:
            raise LoopxError("workspace_unavailable", f"{path} exists but LoopX did not record it as the goal's "
                             "workspace; move it away")
        made = _make(path, rec["project"], goal_id)
        rec.update(path=path, **made)
        changed.update(path=path, **made)
    if changed:
        registry.mutate(actor, lambda w: w.emit("goal.workspace_set", changed, goal_id=goal_id) and None,
                        goal_id=goal_id, allow_closed=True)
    return {**rec, "workdir": _workdir(rec)}


def _workdir(rec: dict) -> str:
    """The project's own place inside the workspace (a project in a subdirectory of its repository
    has the same subdirectory in its worktree)."""
    if rec["kind"] != "git":
        return rec["path"]
    top = _top(rec["project"]) or rec["project"]
    rel = os.path.relpath(rec["project"], top)
    return rec["path"] if rel == "." else os.path.join(rec["path"], rel)


def for_turn(registry, actor: str, goal_id: str, contract: dict) -> str | None:
    """Where the turn's step runs: the contract's own workdir when a capability contributed one
    (Issue-Fix's worktree: no second workspace), else the goal's workspace, made on demand (its
    path is put in the contract's ``agent_channel.workdir``, for the executors and the prompt)."""
    channel = contract["interaction_contract"]["agent_channel"]
    if channel.get("workdir"):
        return None
    ws = ensure(registry, actor, goal_id, default_project=os.getcwd())
    channel["workdir"] = ws["workdir"]
    return ws["workdir"]


def show(registry, goal_id: str) -> dict:
    """The goal's project and workspace, without running git (cheap, for status)."""
    with registry.read() as tx:
        _goal_exists(tx, goal_id)
        return view_tx(tx, goal_id)


def _goal_exists(tx, goal_id: str) -> None:
    from loopx.values.validate import check_id

    if not q.goal_exists(tx, check_id("goal", goal_id)):
        raise LoopxError("goal_not_found", f"no goal {goal_id}")


def view_tx(tx, goal_id: str) -> dict:
    """:func:`show` in an open read transaction (``status G``, the dashboard's goal page): one
    indexed read and one ``stat``; no git. A registry not migrated to the table yet (opened
    read-only) shows no project."""
    from loopx.store.dialect import of as dialect_of

    known = dialect_of(tx).has_table(tx, "goal_workspaces")
    rec = (record(tx, goal_id) if known else None) or \
        {"project": None, "root": None, "path": None, "branch": None, "base": None, "kind": None}
    planned = _path(tx, goal_id, rec)
    present = bool(rec.get("path")) and os.path.isdir(rec["path"])
    return {"goal_id": goal_id, "project": rec.get("project"), "workspace": rec.get("path") or planned,
            "exists": present, "branch": rec.get("branch"), "base": rec.get("base"), "kind": rec.get("kind")}


def _existing(registry, goal_id: str) -> dict:
    with registry.read() as tx:
        _goal_exists(tx, goal_id)
        rec = record(tx, goal_id)
    if not rec or not rec.get("path") or not os.path.isdir(rec["path"]):
        raise LoopxError("workspace_missing", f"{goal_id} has no workspace yet (its next turn makes one)")
    return rec


def _patch(rec: dict) -> tuple[bytes, list[dict]]:
    """The workspace's change against its base, committed or not: ``(binary patch, files)``.

    Built in a temporary index (the workspace's own index is never read or changed): the base
    tree, then every file of the workspace git does not ignore."""
    gd, path = git_dir(rec), rec["path"]
    with tempfile.TemporaryDirectory(prefix="loopx-ws-") as tmp:
        index = os.path.join(tmp, "index")

        def env_run(*args, **kw):
            return gitcmd.run(*args, index_file=index, **kw)

        env_run(path, "read-tree", rec["base"], git_dir=gd, work_tree=path)
        env_run(path, "add", "-A", "--", ".", git_dir=gd, work_tree=path)
        raw = env_run(path, "diff", "--cached", "--no-renames", "--raw", "-z", rec["base"],
                      git_dir=gd, work_tree=path).stdout.decode("utf-8", "replace").split("\0")
        patch = env_run(path, "diff", "--cached", "--no-renames", "--binary", "--no-textconv", "--no-ext-diff",
                        rec["base"], git_dir=gd, work_tree=path).stdout
    files = []
    for i in range(0, len(raw) - 1, 2):
        if not raw[i].startswith(":"):
            continue
        _old, new, _a, _b, status = raw[i][1:].split(" ", 4)
        # A symbolic link or a new executable in your checkout is something your tools may follow or run.
        odd = new in ("120000", "100755") and not _old == new
        files.append({"path": raw[i + 1], "status": status, "mode": new, "risky": risky(raw[i + 1]) or odd})
    return patch, files


def diff(registry, goal_id: str) -> dict:
    """The change the goal's agent made in its workspace, against the workspace's base."""
    rec = _existing(registry, goal_id)
    patch, files = _patch(rec)
    return {"goal_id": goal_id, "project": rec["project"], "workspace": rec["path"], "branch": rec["branch"],
            "base": rec["base"], "files": files, "risky": [f["path"] for f in files if f["risky"]],
            "sha256": hashlib.sha256(patch).hexdigest(), "patch": patch.decode("utf-8", "replace")}


def _check_user(actor: str, kind: str) -> None:
    from loopx.ledger import log as ledger

    if ledger.role(actor) not in ledger.kind(kind).writers:
        raise LoopxError("actor_forbidden", f"{actor} may not {kind.replace('.', ' ')}: that is for the user")


def apply(registry, actor: str, goal_id: str) -> dict:
    """Apply the workspace's diff to the project (user only); ``workspace_conflict`` and nothing
    changed when it does not apply to the checkout as it is now (conflicting local changes)."""
    _check_user(actor, "goal.workspace_applied")
    rec = _existing(registry, goal_id)
    patch, files = _patch(rec)
    if not files:
        raise LoopxError("workspace_empty", f"{goal_id}'s workspace has no change to apply")
    top = _top(rec["project"]) if rec["kind"] == "git" else None
    where = top or rec["project"]
    pinned = {"git_dir": _common_dir(top), "work_tree": top} if top else \
        {"git_dir": git_dir(rec), "work_tree": rec["project"]}
    for check in (True, False):
        proc = gitcmd.run(where, "apply", "--binary", *(["--check"] if check else []), "-", stdin=patch, check=False,
                          **pinned)
        if proc.returncode != 0:
            lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise LoopxError("workspace_conflict", f"the workspace's diff does not apply to {where} as it is now "
                             f"({lines[-1] if lines else 'git apply failed'}); nothing was changed")
    sha = hashlib.sha256(patch).hexdigest()
    body = {"sha256": sha, "files": [f["path"] for f in files][:200], "risky": [f["path"] for f in files if f["risky"]][:200],
            "project": rec["project"]}
    registry.mutate(actor, lambda w: w.emit("goal.workspace_applied", body, goal_id=goal_id) and None,
                    goal_id=goal_id, allow_closed=True)
    return {"goal_id": goal_id, "applied": True, "project": rec["project"], "sha256": sha, "files": files}


def discard(registry, actor: str, goal_id: str) -> dict:
    """Remove the goal's workspace and its branch (user only); the next turn makes a new one."""
    _check_user(actor, "goal.workspace_discarded")
    rec = _existing(registry, goal_id)
    if rec["kind"] == "git":
        top = _top(rec["project"]) or rec["project"]
        gd = _common_dir(top)
        gitcmd.run(top, "worktree", "remove", "--force", "--force", rec["path"], git_dir=gd, check=False)
        shutil.rmtree(rec["path"], ignore_errors=True)
        gitcmd.run(top, "worktree", "prune", git_dir=gd, check=False)
        if rec.get("branch"):
            gitcmd.run(top, "branch", "-D", "--quiet", rec["branch"], git_dir=gd, check=False)
    else:
        shutil.rmtree(rec["path"], ignore_errors=True)
        shutil.rmtree(git_dir(rec), ignore_errors=True)
    registry.mutate(actor, lambda w: w.emit("goal.workspace_discarded", {"path": rec["path"]}, goal_id=goal_id)
                    and None, goal_id=goal_id, allow_closed=True)
    return {"goal_id": goal_id, "discarded": rec["path"], "branch": rec.get("branch")}

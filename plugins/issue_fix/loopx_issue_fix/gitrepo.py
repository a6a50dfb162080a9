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
from typing import Any, Literal, overload

from loopx.api import LoopxError

GIT_TIMEOUT_SECONDS = 120
#: Who LoopX's own commits are by.
IDENTITY = {"GIT_AUTHOR_NAME": "LoopX Issue-Fix", "GIT_AUTHOR_EMAIL": "issue-fix@loopx.invalid",
            "GIT_COMMITTER_NAME": "LoopX Issue-Fix", "GIT_COMMITTER_EMAIL": "issue-fix@loopx.invalid"}
#: Never code: byte-code and test-runner caches (on top of the repository's own ignore rules).
EXCLUDES = "__pycache__/\n*.py[cod]\n.pytest_cache/\n.coverage\n.coverage.*\n.tox/\n.nox/\n.mypy_cache/\n"


#: Configuration that could make git run a program LoopX did not choose, or change what it reads,
#: is overridden on every git call LoopX makes, at git's command scope (``GIT_CONFIG_COUNT``:
#: read after the system, global, repository and worktree files and whatever they include, so
#: it wins over all of them): hooks (``core.hooksPath``), the file-system monitor, the pager,
#: editors, ``askpass``, ssh and proxy commands, credential helpers, signing programs, external
#: diff, the ``ext::``/``fd::`` transports, colour and prefix settings that would change the
#: diffs LoopX parses. Filter drivers have names of the repository's choosing: each one its
#: config defines is switched off too (:func:`gitlinks.pin`). Aliases never apply (LoopX runs only git's
#: built-in commands, which no alias can replace); textconv and external diff programs are also
#: refused on the command line (``--no-textconv``, ``--no-ext-diff``).
SAFE_SETTINGS = (("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"), ("core.untrackedCache", "false"),
                 ("core.pager", "cat"), ("core.editor", "false"), ("sequence.editor", "false"), ("core.askPass", ""),
                 ("core.sshCommand", "ssh"), ("core.gitProxy", ""), ("credential.helper", ""),
                 ("diff.external", ""), ("gpg.program", "false"), ("gpg.ssh.program", "false"),
                 ("gpg.x509.program", "false"), ("commit.gpgSign", "false"), ("tag.gpgSign", "false"),
                 ("protocol.ext.allow", "never"), ("protocol.fd.allow", "never"), ("submodule.recurse", "false"),
                 ("push.recurseSubmodules", "no"), ("color.ui", "false"), ("diff.noprefix", "false"),
                 ("diff.mnemonicPrefix", "false"), ("diff.relative", "false"), ("log.showSignature", "false"))
#: Environment variables through which git (or a program it starts) would take orders from elsewhere.
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                 "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_EXTERNAL_DIFF", "GIT_EXEC_PATH",
                 "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "GIT_PROXY_COMMAND", "GIT_TRACE", "GIT_NAMESPACE",
                 "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_COMMON_DIR", "GIT_REPLACE_REF_BASE",
                 "GIT_GRAFT_FILE", "GIT_SHALLOW_FILE", "GIT_ATTR_SOURCE", "GIT_CONFIG_SYSTEM",
                 "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_TEMPLATE_DIR", "GIT_PROTOCOL_FROM_USER",
                 "GIT_ALLOW_PROTOCOL", "SSH_ASKPASS")
#: ``{path: (environment, settings)}`` of the repository and worktree :func:`gitlinks.pin` checked:
#: git runs there with exactly these git directories, whatever the worktree's ``.git`` file says.
PINNED: dict[str, tuple[dict[str, Any], tuple[tuple[str, str], ...]]] = {}
#: ``{repository: settings}``: the ssh command and credential helpers of the user's own configuration
#: (:func:`gitlinks.pin` reads them with the filter drivers, in one git call).
TRANSPORT: dict[str, tuple[tuple[str, str], ...]] = {}


def _settings_env(settings: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for n, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return env


def git_env(extra: dict[str, Any] | None = None, *, local: bool = True,
            settings: tuple[tuple[str, str], ...] = SAFE_SETTINGS) -> dict[str, Any]:
    """git's environment: no pager or prompt, C locale, replace refs off, :data:`SAFE_SETTINGS`
    (and ``settings``) at the command scope, no system configuration and (for local plumbing) no
    global one either: only the repository's own, overridden."""
    env: dict[str, str | None] = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP
                                  and not k.startswith("GIT_CONFIG_KEY_") and not k.startswith("GIT_CONFIG_VALUE_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "LC_ALL": "C",
                "GIT_NO_REPLACE_OBJECTS": "1", "GIT_CONFIG_NOSYSTEM": "1", **_settings_env(settings)})
    if local:
        env["GIT_CONFIG_GLOBAL"] = "/dev/null"
    env.update(extra or {})
    return {k: v for k, v in env.items() if v is not None}  # None: leave the variable out


@overload
def git(repo: str | Path, *args: str, check: bool = ..., env: dict[str, Any] | None = ...,
        raw: Literal[False] = ..., stdin: bytes | None = ...) -> str: ...


@overload
def git(repo: str | Path, *args: str, check: bool = ..., env: dict[str, Any] | None = ...,
        raw: Literal[True], stdin: bytes | None = ...) -> bytes: ...


def git(repo: str | Path, *args: str, check: bool = True, env: dict[str, Any] | None = None, raw: bool = False,
        stdin: bytes | None = None) -> str | bytes:
    """Run ``git -C repo args...`` (hooks and code-running configuration off: :func:`git_env`); its
    stdout (stripped of the final newline, or bytes if ``raw``). In a repository or worktree
    :func:`gitlinks.pin` checked, with the git directories it found, never the ones ``.git`` names now."""
    where, settings = PINNED.get(str(repo), ({}, ()))
    if args and args[0] == "worktree":
        where = {k: v for k, v in where.items() if k != "GIT_WORK_TREE"}
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              env=git_env({**where, **(env or {})}, settings=SAFE_SETTINGS + settings),
                              timeout=GIT_TIMEOUT_SECONDS, input=stdin)
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
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    out = git(repo, "diff", "--no-ext-diff", "--no-textconv", "--name-only", "-z", "--no-renames", a, b, "--",
              *(paths or []), raw=True)
    return [p.decode("utf-8", "replace") for p in out.split(b"\0") if p]


def diff(repo: str, a: str, b: str, paths: list[str] | None = None) -> dict[str, Any]:
    """What changed from ``a`` to ``b`` (commits or trees), only in ``paths`` when given: the full
    patch, numstat and stat.

    One ``git diff --numstat --stat --patch`` (git prints the three one after the other: the
    numstat lines, the stat lines, a blank line, then the patch), not one git process for each.
    """
    out = git(repo, "diff", "--numstat", "--stat", "--patch", "--no-ext-diff", "--no-textconv", "--no-renames",
              "--binary", a, b, "--", *(paths or []))
    cut = out.find("\n\ndiff --git ")
    head, patch = (out[:cut], out[cut + 2:]) if cut >= 0 else (out, "")
    files: list[dict[str, Any]] = []
    stat: list[str] = []
    ins, dels = 0, 0
    for line in head.splitlines():
        if line.startswith(" ") or stat:  # numstat lines come first; every stat line starts with a space
            stat.append(line)
            continue
        added, removed, path = line.split("\t", 2)
        x = int(added) if added.isdigit() else 0  # binary files show "-"
        y = int(removed) if removed.isdigit() else 0
        files.append({"path": path, "insertions": x, "deletions": y})
        ins, dels = ins + x, dels + y
    return {"files": files, "files_changed": len(files), "insertions": ins, "deletions": dels,
            "stat": "\n".join(stat).rstrip("\n"), "patch": patch}


def commit_shape(repo: str, commit: str) -> tuple[str, list[str]]:
    """``(tree, parents)`` of ``commit`` as its object holds them (replace refs off, no grafts)."""
    out = git(repo, "cat-file", "commit", commit)
    tree, parents = "", []
    for line in out.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(" ")
        if key == "tree":
            tree = value
        elif key == "parent":
            parents.append(value)
    return tree, parents


def local_refs(repo: str) -> tuple[dict[str, str], dict[str, str]]:
    """``({ref: sha} of every ref, {ref: worktree path} of the branches checked out somewhere})``
    (all worktrees share the refs), from one ``git for-each-ref``."""
    out = git(repo, "for-each-ref", "--format=%(objectname) %(refname)%00%(worktreepath)")
    refs, checked_out = {}, {}
    for line in out.splitlines():
        head, _, where = line.partition("\0")
        sha, _, ref = head.partition(" ")
        if ref:
            refs[ref] = sha
            if where:
                checked_out[ref] = where
    return refs, checked_out


def source_mtime(blob: str) -> int:
    """The modification time an exported file gets: a function of its blob id alone, so that the
    same content has the same time in every export (Python's timestamp ``.pyc`` check then hits for
    an unchanged file and misses for a changed one; :mod:`loopx_issue_fix.bytecode` does not rely
    on it, it copies bytecode only for files whose blob is unchanged)."""
    return 1_000_000_000 + int(blob[:8], 16) % (1 << 29)


def export_tree(repo: str, tree: str, dest: Path) -> dict[str, str]:
    """Write exactly the files of ``tree`` into the new directory ``dest``; ``{path: blob id}`` of them.

    The blobs are written as stored (``git cat-file``): no checkout, so no ``.gitattributes``
    filters or conversions, no hooks, nothing from the worktree it came from. Symbolic links are
    made as links, executable files executable; submodules are left out. Each file's mtime is
    :func:`source_mtime` of its blob.
    """
    import hashlib

    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", tree, raw=True)
    entries = []
    for raw in out.split(b"\0"):
        if not raw:
            continue
        meta, name = raw.split(b"\t", 1)
        mode, kind, sha = meta.decode().split()
        if kind == "blob":
            entries.append((mode, sha, os.fsdecode(name)))
    dest.mkdir(parents=True, exist_ok=False)
    if not entries:
        return {}
    data = git(repo, "cat-file", "--batch", raw=True, stdin="".join(f"{sha}\n" for _, sha, _ in entries).encode())
    pos = 0
    root = dest.resolve()
    for mode, sha, path in entries:
        header_end = data.index(b"\n", pos)
        size = int(data[pos:header_end].split()[2])
        body = data[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        # What is written is what the tree names: git hands over the stored object (no replace
        # refs), and the bytes are checked against its id all the same.
        if hashlib.new("sha1" if len(sha) == 40 else "sha256", b"blob %d\0" % size + body).hexdigest() != sha:
            raise LoopxError("issue_fix.tree_mismatch", f"the object store does not hold blob {sha} of {path} as named")
        target = root / path
        if ".." in Path(path).parts or not str(target).startswith(str(root) + os.sep):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            os.symlink(os.fsdecode(body), target)
        else:
            target.write_bytes(body)
            if mode == "100755":
                target.chmod(0o755)
            when = source_mtime(sha)
            os.utime(target, (when, when))
    return {path: sha for _, sha, path in entries}


def ignored_files(worktree: str, limit: int = 200) -> list[str]:
    """Files in the worktree that are ignored (``.gitignore``, ``info/exclude``, the goal's exclude):
    present for the agent, never part of the code LoopX verifies."""
    out = git(worktree, *_excludes(worktree), "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
              raw=True)
    skip = ("__pycache__/", ".pytest_cache/")
    paths = [p.decode("utf-8", "replace") for p in out.split(b"\0") if p]
    return [p for p in paths if not any(s in p for s in skip) and not p.endswith((".pyc", ".pyo"))][:limit]


def remove_goal_worktree(repo: str, worktree: str, branch: str | None) -> list[str]:
    """Remove the goal's worktree and (when ``branch``) its branch; what was removed."""
    import shutil

    done = []
    Path(worktree).parent.joinpath("candidate.index").unlink(missing_ok=True)
    if Path(worktree).exists():
        git(repo, "worktree", "remove", "--force", "--force", worktree, check=False)
        if Path(worktree).exists():
            shutil.rmtree(worktree, ignore_errors=True)
        done.append(worktree)
    git(repo, "worktree", "prune", check=False)
    if branch and branch_exists(repo, branch):
        git(repo, "branch", "--quiet", "-D", branch, check=False)
        if not branch_exists(repo, branch):
            done.append(f"branch {branch}")
    return done


def blob(repo: str, tree: str, path: str) -> bytes | None:
    """The bytes of ``path`` in ``tree`` as stored, or ``None`` when it holds no such file."""
    sha = git(repo, "rev-parse", "--verify", "--quiet", f"{tree}:{path}", check=False)
    if not sha:
        return None
    return git(repo, "cat-file", "blob", sha, raw=True)


def blob_id(repo: str, tree: str, path: str) -> str | None:
    """The blob hash of ``path`` in ``tree`` (``None``: absent)."""
    return git(repo, "rev-parse", "--verify", "--quiet", f"{tree}:{path}", check=False) or None


def worktree_branches(repo: str) -> dict[str, str]:
    """``{worktree path: branch name}`` of the repository's worktrees that have a branch checked out."""
    out, found, path = git(repo, "worktree", "list", "--porcelain"), {}, None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line.startswith("branch refs/heads/") and path:
            found[path] = line[len("branch refs/heads/"):]
    return found

"""The git links Issue-Fix follows, checked before any git runs for a step (issue 34).

A step may edit the worktree's files, never git's own metadata (:mod:`loopx.turn.confine` keeps it
read-only); where a link was changed anyway (a turn the user ran unconfined, or a linked
worktree's ``.git`` file where no mount namespace could be had) LoopX refuses with
``issue_fix.git_tampered`` rather than follow it. :func:`pin` checks the links of a goal and
makes every later git call there (:func:`gitrepo.git`) name its git directories explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopx.api import LoopxError
from loopx_issue_fix import gitrepo

if TYPE_CHECKING:
    from loopx_issue_fix.state import IssueFixState


def _tampered(what: str) -> LoopxError:
    return LoopxError("issue_fix.git_tampered", f"nothing run: {what}; the git metadata is not what LoopX or git "
                      "made (a step may edit files, never git's own); restore it or close the goal")


def _read_link(path: Path, prefix: str) -> str:
    """The value of a one-line git link file (``gitdir: X``, a ``commondir``), not following a
    symbolic link in its place."""
    try:
        if path.is_symlink() or not path.is_file():
            raise _tampered(f"{path} is not a regular file")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _tampered(f"{path} cannot be read ({exc.strerror})") from None
    line = text.strip()
    if "\n" in line or not line.startswith(prefix):
        raise _tampered(f"{path} is not a git link file")
    return line[len(prefix):].strip()


def user_common_dir(root: str) -> Path:
    """The common git directory of the user's checkout ``root``, from the files git keeps
    (``.git``, ``commondir``): ``issue_fix.git_tampered`` when a main repository's ``.git`` has a
    ``commondir`` (git would follow it to a config of someone else's choosing)."""
    dotgit = Path(root, ".git")
    if dotgit.is_dir() and not dotgit.is_symlink():
        if os.path.lexists(dotgit / "commondir"):
            raise _tampered(f"{dotgit} holds a commondir file (a main repository has none)")
        return dotgit.resolve()
    gitdir = (Path(root) / _read_link(dotgit, "gitdir:")).resolve()
    if os.path.lexists(gitdir / "commondir"):
        return (gitdir / _read_link(gitdir / "commondir", "")).resolve()
    return gitdir


def _settings(common: Path) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """``(filters, transport)`` from one ``git config`` read: settings that switch off every filter
    driver the configuration defines (their names are the repository's: they cannot be listed in
    advance), and the ssh command and credential helpers of the user's own (global and system)
    configuration, which :func:`gitremote.push` uses instead of anything the repository names."""
    out = gitrepo.git(common, "config", "--show-scope", "-z", "--get-regexp",
                      r"^(filter\.|core\.sshcommand$|credential\..*helper$)", check=False, raw=True,
                      env={"GIT_DIR": str(common), "GIT_CONFIG_GLOBAL": os.environ.get("GIT_CONFIG_GLOBAL"),
                           "GIT_CONFIG_NOSYSTEM": None})
    parts = out.split(b"\0")
    names, transport = set(), []
    for scope, entry in zip(parts[::2], parts[1::2]):
        key, _, value = entry.decode("utf-8", "replace").partition("\n")
        if key.startswith("filter.") and key.count(".") >= 2:
            names.add(key.rsplit(".", 1)[0])
        elif scope in (b"global", b"system") and not key.startswith("filter."):
            transport.append(("core.sshCommand" if key == "core.sshcommand" else key, value))
    filters = tuple((f"{name}.{part}", value) for name in sorted(names)
                    for part, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")))
    return filters, tuple(transport)


def pin(state: IssueFixState) -> Path:
    """Check the git links of an Issue-Fix goal and make every later git call there use them.

    The common directory is the one ``start`` found (``git_common_dir``); the user's
    checkout must still lead there, and the goal's worktree (when it exists) must be the
    worktree LoopX created: its ``.git`` file names ``<common>/worktrees/<name>``, whose ``gitdir``
    names that ``.git`` file back and whose ``commondir`` leads to the common directory.
    Otherwise ``issue_fix.git_tampered`` and nothing runs. Every git call in those two places
    then gets ``GIT_DIR``, ``GIT_COMMON_DIR`` and ``GIT_WORK_TREE`` explicitly, and filter
    drivers switched off. Returns the common directory.
    """
    # Goals started before it was recorded: their directory is <common>/loopx-issue-fix/<goal>.
    common = Path(state.git_common_dir or Path(state.goal_dir).resolve().parent.parent).resolve()
    repo = state.repo
    found = user_common_dir(repo)
    if found != common:
        raise _tampered(f"{repo} now leads to the git directory {found}, not {common}")
    main = Path(repo, ".git")
    repo_gitdir = common if main.is_dir() else (Path(repo) / _read_link(main, "gitdir:")).resolve()
    settings, transport = _settings(common)
    gitrepo.TRANSPORT[repo] = transport
    gitrepo.PINNED[repo] = ({"GIT_DIR": str(repo_gitdir), "GIT_COMMON_DIR": str(common), "GIT_WORK_TREE": repo},
                            settings)
    wt = Path(state.worktree)
    if os.path.lexists(wt / ".git"):
        named = Path(os.path.normpath(wt / _read_link(wt / ".git", "gitdir:")))
        gitdir = named.resolve()
        if named.is_symlink() or gitdir.parent != common / "worktrees":
            raise _tampered(f"{wt / '.git'} points at {named}, not a worktree of {common}")
        back = Path(_read_link(gitdir / "gitdir", ""))
        if os.path.realpath(back) != os.path.realpath(wt / ".git"):
            raise _tampered(f"{gitdir / 'gitdir'} names {back}, not {wt / '.git'}")
        if (gitdir / _read_link(gitdir / "commondir", "")).resolve() != common:
            raise _tampered(f"{gitdir / 'commondir'} does not lead to {common}")
        gitrepo.PINNED[str(wt)] = ({"GIT_DIR": str(gitdir), "GIT_COMMON_DIR": str(common),
                                    "GIT_WORK_TREE": str(wt)}, settings)
    return common


def user_transport(repo: str) -> tuple[Any, ...]:
    """The ssh command and credential helpers of the user's global and system configuration, for
    a repository :func:`pin` did not check (``start`` asks the remote before any step)."""
    return _settings(user_common_dir(repo))[1]

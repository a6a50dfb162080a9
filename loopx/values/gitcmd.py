"""git run by the core on a goal's behalf, steered by nothing the agent can write.

LoopX's own git calls (:mod:`loopx.domain.workspace`: making a goal's worktree, its diff, applying it)
run with the user's authority, in repositories whose files an agent may have written. So each
call here runs with:

* no system or global configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``),
  replace refs off (``GIT_NO_REPLACE_OBJECTS=1``), no pager, prompt or editor, C locale;
* every configuration key that makes git run a program (hooks, fsmonitor, pager, editors,
  askpass, ssh/proxy commands, credential helpers, signing programs, external diff, the
  ``ext::``/``fd::`` transports) overridden at the command scope (``GIT_CONFIG_COUNT``, which
  wins over every file), and each filter driver the repository's configuration names switched
  off; ``--no-textconv --no-ext-diff`` on every diff;
* the git directory and work tree pinned (``GIT_DIR``, ``GIT_WORK_TREE``) when the caller knows
  them, so a ``.git`` file or ``commondir`` the agent rewrote is never followed;
* every ``GIT_*`` variable of LoopX's own environment that could redirect git dropped.

The same rules as Issue-Fix's (``plugins/issue_fix/.../gitrepo.py``), kept small for the core.
"""

from __future__ import annotations

import os
import subprocess

from loopx.values.errors import LoopxError

TIMEOUT_SECONDS = 120
IDENTITY = {"GIT_AUTHOR_NAME": "LoopX", "GIT_AUTHOR_EMAIL": "loopx@loopx.invalid",
            "GIT_COMMITTER_NAME": "LoopX", "GIT_COMMITTER_EMAIL": "loopx@loopx.invalid"}
#: Configuration that would make git run a program LoopX did not choose, or change what it prints.
SAFE_SETTINGS = (("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"), ("core.untrackedCache", "false"),
                 ("core.pager", "cat"), ("core.editor", "false"), ("sequence.editor", "false"), ("core.askPass", ""),
                 ("core.sshCommand", "ssh"), ("core.gitProxy", ""), ("credential.helper", ""),
                 ("diff.external", ""), ("gpg.program", "false"), ("gpg.ssh.program", "false"),
                 ("gpg.x509.program", "false"), ("commit.gpgSign", "false"), ("tag.gpgSign", "false"),
                 ("protocol.ext.allow", "never"), ("protocol.fd.allow", "never"), ("submodule.recurse", "false"),
                 ("color.ui", "false"), ("diff.noprefix", "false"), ("diff.mnemonicPrefix", "false"),
                 ("diff.relative", "false"), ("core.quotePath", "true"), ("core.symlinks", "true"),
                 ("apply.whitespace", "nowarn"))


def _dropped(name: str) -> bool:
    return name.startswith("GIT_") or name in ("SSH_ASKPASS", "PAGER", "EDITOR", "VISUAL")


def environment(git_dir: str | None = None, work_tree: str | None = None, settings=(),
                index_file: str | None = None) -> dict:
    """git's environment for LoopX's own calls (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not _dropped(k)}
    every = SAFE_SETTINGS + tuple(settings)
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "LC_ALL": "C",
                "GIT_NO_REPLACE_OBJECTS": "1", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_CONFIG_COUNT": str(len(every)), **IDENTITY})
    for n, (key, value) in enumerate(every):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    if git_dir:
        env["GIT_DIR"] = git_dir
    if work_tree:
        env["GIT_WORK_TREE"] = work_tree
    if index_file:
        env["GIT_INDEX_FILE"] = index_file
    return env


def run(cwd: str, *args: str, git_dir: str | None = None, work_tree: str | None = None, check: bool = True,
        stdin: bytes | None = None, code: str = "workspace_git_failed",
        index_file: str | None = None) -> subprocess.CompletedProcess:
    """``git args...`` in ``cwd`` with :func:`environment`; a failure (``check``) raises ``code``.

    Filter drivers are named by the repository's configuration: each one found is switched off
    on this call (its ``clean``/``smudge``/``process`` emptied).
    """
    settings = _filter_overrides(cwd, git_dir)
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, input=stdin, timeout=TIMEOUT_SECONDS,
                              env=environment(git_dir, work_tree, settings, index_file))
    except FileNotFoundError:
        raise LoopxError(code, "git is not installed") from None
    except subprocess.TimeoutExpired:
        raise LoopxError(code, f"git {args[0]} took longer than {TIMEOUT_SECONDS}s") from None
    if check and proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise LoopxError(code, f"git {args[0]} failed in {cwd}: {lines[-1] if lines else proc.returncode}")
    return proc


def out(cwd: str, *args: str, **kw) -> str:
    """:func:`run`'s stdout as text, without the final newline."""
    return run(cwd, *args, **kw).stdout.decode("utf-8", "replace").rstrip("\n")


def _filter_overrides(cwd: str, git_dir: str | None) -> tuple:
    """``filter.<name>.clean/smudge/process`` emptied for every filter driver the config names."""
    try:
        proc = subprocess.run(["git", "config", "--name-only", "--get-regexp", r"^filter\."], cwd=cwd,
                              capture_output=True, timeout=TIMEOUT_SECONDS, env=environment(git_dir))
    except (OSError, subprocess.TimeoutExpired):
        return ()
    names = {line.rsplit(".", 1)[0] for line in proc.stdout.decode("utf-8", "replace").splitlines() if "." in line}
    return tuple((f"{n}.{part}", "") for n in sorted(names) for part in ("clean", "smudge", "process")) + \
        tuple((f"{n}.required", "false") for n in sorted(names))


def git_dir_of(path: str) -> str | None:
    """The git directory of the repository whose top is ``path`` (``None`` if ``path`` is not the
    top of a git work tree). Asked of git once, when LoopX itself made or recorded the checkout."""
    proc = run(path, "rev-parse", "--show-toplevel", "--absolute-git-dir", check=False)
    if proc.returncode != 0:
        return None
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    if len(lines) < 2 or os.path.realpath(lines[0]) != os.path.realpath(path):
        return None
    return lines[1]

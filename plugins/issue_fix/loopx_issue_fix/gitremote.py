"""Git that talks to a remote: pushing the verified commit and reading a remote's refs.

It runs through the core's ``run_command`` (its own process group, killed whole at the time-out),
with the ssh command and credential helpers of the user's own configuration
(:func:`gitlinks.user_transport`), never the repository's.
"""

from __future__ import annotations

import os
from typing import Any

from loopx.api import LoopxError
from loopx_issue_fix import gitlinks, gitrepo


def transport_env(repo: str) -> dict[str, Any]:
    """The environment of a git that talks to a remote, or of ``gh``/``glab`` (which run git) (for
    :func:`loopx.api.process.run`, which adds it to LoopX's own): :func:`gitrepo.git_env` with the
    user's global configuration kept (``insteadOf``, credentials), but every program it may start chosen here: the ssh command and credential
    helpers of the user's global and system configuration (never the repository's). The callers
    name git's own ``receive-pack`` and ``upload-pack`` on the command line: a
    ``remote.<name>.receivepack`` would run on this machine for a local remote, and for those keys
    the *first* value git reads wins, not the last."""
    if repo not in gitrepo.TRANSPORT:
        gitrepo.TRANSPORT[repo] = gitlinks.user_transport(repo)
    ssh = [v for k, v in gitrepo.TRANSPORT[repo] if k == "core.sshCommand" and v]
    helpers = [(k, v) for k, v in gitrepo.TRANSPORT[repo] if k != "core.sshCommand"]
    where, filters = gitrepo.PINNED.get(str(repo), ({}, ()))
    settings = (*[(k, ssh[-1] if k == "core.sshCommand" and ssh else v) for k, v in gitrepo.SAFE_SETTINGS], *helpers,
                *filters)
    full = gitrepo.git_env({k: v for k, v in where.items() if k != "GIT_WORK_TREE"}, local=False, settings=settings)
    return {k: None for k in os.environ if k not in full} | full


def push(repo: str, remote: str, commit: str, branch: str, timeout: float) -> dict[str, Any]:
    """Push exactly ``commit`` to ``refs/heads/<branch>`` on ``remote``; then read back what it holds.

    Runs in the user's repository ``repo`` (the verified commit is in its object store), so a
    remote with a relative URL (``../origin.git``) means what it means there; hooks and
    code-running configuration are off, replace refs too (:func:`transport_env`), the user's
    global configuration (credentials, ``insteadOf``) stays. Returns ``{"report", "remote_sha",
    "duration_seconds"}``; ``issue_fix.publish_failed`` when git fails or the remote does not
    hold ``commit`` afterwards.
    """
    from loopx import api

    res = api.process.run(["git", "-C", repo, "push", "--porcelain", "--no-verify", "--receive-pack=git-receive-pack",
                       remote, f"{commit}:refs/heads/{branch}"], env=transport_env(repo), timeout=timeout,
                      confine=False)
    report = res["output_tail"].strip()
    if res["timed_out"]:
        raise LoopxError("issue_fix.publish_failed", f"git push to {remote} took longer than {timeout:g}s (killed)")
    if res["exit_code"] != 0:
        last = report.splitlines()[-1] if report else f"exit {res['exit_code']}"
        raise LoopxError("issue_fix.publish_failed", f"git push {remote} {branch} failed: {last}")
    remote_sha = (remote_refs(repo, remote, timeout, f"refs/heads/{branch}") or {}).get(f"refs/heads/{branch}")
    if remote_sha != commit:
        raise LoopxError("issue_fix.publish_failed", f"after the push {remote} holds {remote_sha} for {branch}, not {commit}")
    return {"report": report[-2000:], "remote_sha": remote_sha, "duration_seconds": res["duration_seconds"]}


def remote_refs(repo: str, remote: str, timeout: float, *patterns: str) -> dict[str, str] | None:
    """``{ref: sha}`` that ``remote`` holds (``git ls-remote``), or ``None`` when it cannot be asked."""
    from loopx import api

    back = api.process.run(["git", "-C", repo, "ls-remote", "--upload-pack=git-upload-pack", remote, *patterns],
                       env=transport_env(repo), timeout=timeout, tail_bytes=1 << 20, confine=False)
    if back["exit_code"] != 0 or back["timed_out"]:
        return None
    refs = {}
    for line in back["output_tail"].splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) >= 40:
            refs[parts[1]] = parts[0]
    return refs

"""Pages a capability serves on a port of its own, announced so the read-only dashboard links to them.

A capability's server (the approvals page, say) calls :func:`announce` once it listens: that
writes ``<LoopX data dir>/pages/<capability>.json`` (mode 0600, replaced atomically) naming its
URL, its process, its host and the registry it serves; :func:`withdraw` removes the file when
the server stops. The status server only *reads* these files (:func:`live`): it lists a page
when the file is for the registry it serves itself, its process is still alive on this host,
and its URL is plain ``http``/``https``. So the dashboard never writes anything to learn about
a page, a stale file (a server killed with SIGKILL) is ignored, and a page serving another
registry is never linked. Confined agents cannot write there (they write only beneath their
workdir, see :mod:`loopx.turn.confine`).
"""

from __future__ import annotations

import json
import os
import re
import socket

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def pages_dir() -> str:
    """Where announcements live: ``pages/`` in LoopX's user data directory."""
    from loopx.values.userdirs import data_dir

    return os.path.join(data_dir(), "pages")


def registry_id(tx) -> str | None:
    """The id of the registry ``tx`` reads (None for a registry not keyed yet)."""
    from loopx.ledger.keys import stored_id

    return stored_id(tx)


def announce(capability: str, *, title: str, url: str, registry: str | None) -> str:
    """Announce that this process serves ``url`` (``title``) for the registry whose id is ``registry``.

    Returns the file's path, for :func:`withdraw`.
    """
    if not _NAME.fullmatch(capability):
        raise ValueError(f"not a capability name: {capability!r}")
    folder = pages_dir()
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{capability}.json")
    body = json.dumps({"capability": capability, "title": title, "url": url, "pid": os.getpid(),
                       "host": socket.gethostname(), "registry_id": registry})
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.replace(temp, path)  # a reader sees the old file or the new one, never half of one
    return path


def withdraw(path: str) -> None:
    """Remove this process's announcement (left alone when another process has replaced it since)."""
    try:
        with open(path, encoding="utf-8") as f:
            if json.load(f).get("pid") != os.getpid():
                return
        os.remove(path)
    except (OSError, ValueError):
        pass


def live(registry: str | None) -> list[dict]:
    """The announced pages serving the registry whose id is ``registry``: ``[{capability, title, url}]``."""
    try:
        names = sorted(os.listdir(pages_dir()))
    except OSError:
        return []
    host = socket.gethostname()
    out = []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(pages_dir(), name), encoding="utf-8") as f:
                page = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(page, dict) or registry is None or page.get("registry_id") != registry:
            continue
        url, pid = page.get("url"), page.get("pid")
        if not (isinstance(url, str) and re.fullmatch(r"https?://[^\s\"'<>]+", url)):
            continue
        if page.get("host") != host or not isinstance(pid, int) or not _alive(pid):
            continue
        out.append({"capability": str(page.get("capability", name[:-5])), "title": str(page.get("title", "")),
                    "url": url})
    return out


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def dashboard_stylesheet() -> bytes:
    """The dashboard's stylesheet (``loopx/dashboard/dashboard.css``), for a page that should look like it."""
    from pathlib import Path

    return (Path(__file__).resolve().parent.parent / "dashboard" / "dashboard.css").read_bytes()

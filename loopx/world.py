"""The world a confined step sees: a filesystem, process and terminal view built from an allowlist.

Landlock (:mod:`loopx.landlock`) says what a step may read and write; it does not stop a step
from connecting to a pathname socket (the user's tmux, ssh-agent), from reading another
process's ``/proc/PID/environ`` as root, or from leaving ``setsid`` sleepers behind. So every
command a confined step starts runs in a *world* of its own (:func:`wrap`), built by bubblewrap
(``bwrap``) where it is installed:

* the system read-only (``/`` bound read-only), with a private ``/tmp`` (the step's own temp
  directory, shared by the step's commands and removed with the step), ``/dev/shm`` (likewise),
  an empty ``/run`` (but for the resolver's directory) and ``/run/user/<uid>``, and a minimal
  ``/dev`` with a terminal namespace of its own;
* of ``$HOME`` only what is declared (:func:`plan`): the step's writable roots (its workdir, the
  agent CLIs' state directories) read-write, what the executor declares read-only, LoopX's own
  interpreter where it lives there; everything else of it (``~/.ssh``, ``~/.gnupg``,
  ``~/.config/gh``, ``~/.aws``, shell files) is absent;
* paths that must stay read-only beneath a writable root (git's metadata, the agent CLIs'
  settings) bound read-only; paths that must stay hidden (the registry, LoopX's key) masked;
* its own PID namespace and ``/proc`` (no other process is visible, and when the command ends its
  init exits and the kernel kills everything left in the namespace, ``setsid`` double forks
  too), a new session (no controlling terminal), no capabilities even as root, and
  ``--die-with-parent``.

Landlock still applies inside, as before (the watcher enforces it after the world is built), and
scopes abstract unix sockets and signals to the step. The network is shared (the model API).

The plan is data (:func:`plan`, written as ``<policy>.world.json`` beside the step's Landlock
policy); :func:`wrap` turns it into a ``bwrap`` command line. This module imports nothing of LoopX
(:mod:`loopx.process`, in the lowest layer, calls it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

#: ``LOOPX_CONFINE_BACKEND``: ``none`` (no confinement: a turn is refused), ``landlock`` (Landlock
#: alone, no world: the user's explicit choice of the weaker confinement), ``bwrap``.
ENV_BACKEND = "LOOPX_CONFINE_BACKEND"
#: ``LOOPX_BWRAP``: the bubblewrap program (default ``bwrap`` on PATH).
ENV_BWRAP = "LOOPX_BWRAP"
_FOUND: dict = {}


def bwrap() -> str | None:
    """The bubblewrap program, when it is installed and can build a world here (asked once)."""
    program = os.environ.get(ENV_BWRAP) or "bwrap"
    if program in _FOUND:
        return _FOUND[program]
    found = shutil.which(program)
    if found:
        import subprocess

        try:
            ok = subprocess.run([found, *_base_args(), "--", "true"], stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        found = found if ok else None
    _FOUND[program] = found
    return found


def _base_args() -> list[str]:
    args = ["--die-with-parent", "--unshare-pid", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]  # root in the world is root without capabilities
    return args


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _installs() -> list[str]:
    """LoopX's own interpreter and source (the watcher and the step's ``loopx`` client run them)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, here, os.path.dirname(_real(sys.executable))}
    return sorted(_real(p) for p in paths if p)


def program_paths(program: str) -> list[str]:
    """What running ``program`` needs to read: its directory, the directory it links to (for a
    package's ``node_modules/.bin`` entry, the whole ``node_modules``) and its ``#!`` interpreter's;
    for an executor to declare (:func:`plan`'s ``home_read``) when the CLI lives in ``$HOME``."""
    found = shutil.which(program)
    if not found:
        return []
    out = {os.path.dirname(os.path.abspath(found))}
    real = _real(found)
    out.add(os.path.dirname(real))
    if "/node_modules/" in real:
        out.add(real[: real.index("/node_modules/") + len("/node_modules")])
    try:
        with open(real, "rb") as f:
            head = f.read(256).split(b"\n", 1)[0]
    except OSError:
        head = b""
    if head.startswith(b"#!"):
        words = head[2:].decode(errors="replace").split()
        interpreter = words[1] if words and os.path.basename(words[0]) == "env" and len(words) > 1 else \
            (words[0] if words else "")
        where = shutil.which(interpreter) if interpreter else None
        if where:
            out.add(os.path.dirname(_real(where)))
    return sorted(out)


def plan(*, step_dir: str, tmp: str, writable: list[str], read_only: list[str], hidden: list[str],
         home_read: list[str] = (), grants: list[str] = ()) -> dict:
    """The world of a step, as data: ``{"mounts": [[kind, source, target], ...], "rw_rules": [...]}``.

    ``writable``: the roots bound read-write at their own paths (the workdir, the agent CLIs'
    state); ``read_only``: paths beneath them bound read-only over themselves; ``hidden``: paths
    masked wherever a bound tree holds them; ``home_read``: what the executor declares it reads
    (read-only); ``grants``: what the user granted the goal (read-only paths, sockets).
    ``rw_rules``: the world's own writable places, for the Landlock policy.
    """
    home = _real("~") if os.path.expanduser("~") != "~" else None
    uid = os.getuid()
    shm = os.path.join(step_dir, "shm")
    os.makedirs(shm, mode=0o700, exist_ok=True)
    masked = ["/tmp", "/run"] + ([home] if home and home != "/" else [])
    mounts: list[list[str]] = [["tmpfs", "", "/run"]]
    resolv = _real("/etc/resolv.conf")
    if _under(resolv, "/run") and os.path.exists(resolv):  # systemd-resolved's stub: DNS still works
        mounts.append(["ro", os.path.dirname(resolv), os.path.dirname(resolv)])
    mounts += [["rw", tmp, "/tmp"], ["rw", shm, "/dev/shm"], ["tmpfs", "", f"/run/user/{uid}"]]
    layers: list[list[str]] = [["tmpfs", "", home]] if home and home != "/" else []
    for path in _installs() + [_real(p) for p in [*home_read, *grants]]:
        if os.path.exists(path) and any(_under(path, m) for m in masked):
            layers.append(["ro", path, path])
    layers.append(["ro", step_dir, step_dir])  # the broker's socket, the step's `loopx`, its policy
    # /dev is the world's own (a devpts of its own: none of the user's terminals).
    layers += [["rw", p, p] for p in writable if os.path.exists(p) and not _under(p, "/dev")]
    # Parents before what lies beneath them: a workdir that holds $HOME does not uncover it again.
    layers.sort(key=lambda m: m[2].count("/"))
    mounts += layers
    trees = [m[2] for m in layers if m[0] != "tmpfs"]
    for path in read_only:
        if os.path.lexists(path) and any(_under(path, t) for t in trees):
            mounts.append(["ro", path, path])
    for path in hidden:
        if os.path.lexists(path) and any(_under(path, t) for t in trees):
            mounts.append(["tmpfs", "", path] if os.path.isdir(path) else ["ro", os.devnull, path])
    # The masks stay read-only whatever Landlock grants above them (a $HOME inside /tmp).
    mounts += [["remount-ro", "", m[2]] for m in layers if m[0] == "tmpfs"] + [["remount-ro", "", "/run"]]
    first = next((p for p in writable if os.path.isdir(p) and not _under(p, "/dev")), "/")
    return {"mounts": mounts, "rw_rules": [f"/run/user/{uid}"], "workdir": first,
            "visible": [m[2] for m in layers if m[0] != "tmpfs"], "masked": masked}


def write(path: str, world: dict) -> str:
    """Write the plan ``world`` to ``path`` (read by :func:`wrap` for every command of the step)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(world, f)
    return path


def file_for(policy: str | None) -> str | None:
    """The world file that goes with the Landlock policy file ``policy`` (``None`` if it has none)."""
    if not policy:
        return None
    found = os.path.splitext(policy)[0] + ".world.json"
    return found if os.path.exists(found) else None


def wrap(argv: list[str], world_file: str, cwd: str | None) -> list[str]:
    """``argv`` started inside the world of ``world_file`` (a ``bwrap`` command line).

    Raises ``OSError`` when bubblewrap is gone: the command must not start without its world.
    """
    program = bwrap()
    if program is None:
        raise OSError("bubblewrap (bwrap) is not available to build the step's world")
    with open(world_file, encoding="utf-8") as f:
        world = json.load(f)
    args = [program, *_base_args()]
    for kind, source, target in world["mounts"]:
        if kind == "tmpfs":
            args += ["--tmpfs", target]
        elif kind == "remount-ro":
            args += ["--remount-ro", target]
        elif kind == "rw":
            args += ["--bind", source, target]
        else:
            args += ["--ro-bind", source, target]
    here = _real(cwd or os.getcwd())
    if any(_under(here, m) for m in world.get("masked", [])) and \
            not any(_under(here, v) for v in world.get("visible", [])):
        here = world.get("workdir") or "/"  # LoopX's own directory is not in the world
    args += ["--chdir", here]
    return [*args, "--", *argv]

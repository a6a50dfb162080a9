"""The world a confined step sees: a filesystem, process and terminal view built from an allowlist.

Landlock (:mod:`loopx.sandbox.landlock`) says what a step may read and write; it does not stop a step
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

The plan is data (:class:`World`, made by :func:`plan`, written as ``<policy>.world.json``
beside the step's Landlock policy, versioned and read back strictly: a file LoopX did not write
starts nothing); :func:`wrap` turns it into a ``bwrap`` command line. Of LoopX this module
imports only :mod:`loopx.sandbox.landlock` (its JSON checks; :mod:`loopx.sandbox.process`, in the lowest layer,
calls this one).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import ClassVar, Literal

import attrs

from loopx.sandbox import landlock

#: ``LOOPX_CONFINE_BACKEND``: ``none`` (no confinement: a turn is refused), ``landlock`` (Landlock
#: alone, no world: the user's explicit choice of the weaker confinement), ``bwrap``.
ENV_BACKEND = "LOOPX_CONFINE_BACKEND"
#: ``LOOPX_BWRAP``: the bubblewrap program (default ``bwrap`` on PATH).
ENV_BWRAP = "LOOPX_BWRAP"
_FOUND: dict[str, str | None] = {}
#: What a mount does: a tmpfs at ``target``, ``source`` bound read-only / read-write at ``target``,
#: or ``target`` (a tmpfs mounted before) made read-only.
MountKind = Literal["tmpfs", "ro", "rw", "remount-ro"]
KINDS = ("tmpfs", "ro", "rw", "remount-ro")


@attrs.frozen
class Mount:
    """One mount of the world, in the order bubblewrap makes them."""

    kind: MountKind = attrs.field(validator=attrs.validators.in_(KINDS))
    source: str
    target: str

    def args(self) -> list[str]:
        """This mount as ``bwrap`` arguments."""
        if self.kind == "tmpfs":
            return ["--tmpfs", self.target]
        if self.kind == "remount-ro":
            return ["--remount-ro", self.target]
        return ["--bind" if self.kind == "rw" else "--ro-bind", self.source, self.target]


@attrs.frozen
class World:
    """The world of a step (:func:`plan`): its ``mounts``; ``rw_rules``, the world's own writable
    places, for the Landlock policy; ``workdir``, where a command starts whose directory is not in
    the world; ``visible``, the trees bound in; ``masked``, the trees hidden but for those."""

    #: The version of the world file :meth:`to_json` writes and :meth:`from_json` reads.
    VERSION: ClassVar[int] = 1

    mounts: tuple[Mount, ...]
    rw_rules: tuple[str, ...]
    workdir: str
    visible: tuple[str, ...]
    masked: tuple[str, ...]

    def shows(self, path: str) -> bool:
        """Whether the real path ``path`` is in the world (not masked, or bound in again)."""
        return not any(_under(path, m) for m in self.masked) or any(_under(path, v) for v in self.visible)

    def chdir_for(self, cwd: str) -> str:
        """Where a command asked to start in the real path ``cwd`` starts in the world."""
        return cwd if self.shows(cwd) else (self.workdir or "/")  # LoopX's own directory is not in it

    def to_json(self) -> str:
        """The world file's text (versioned; :meth:`from_json` reads it back)."""
        import json

        return json.dumps({"version": self.VERSION, "mounts": [[m.kind, m.source, m.target] for m in self.mounts],
                           "rw_rules": list(self.rw_rules), "workdir": self.workdir,
                           "visible": list(self.visible), "masked": list(self.masked)})

    @classmethod
    def from_json(cls, text: str | bytes) -> World:
        """The world in ``text``; :class:`loopx.sandbox.landlock.PolicyError` unless it is exactly what
        :meth:`to_json` writes (this version, these keys, these types)."""
        keys = ("version", "mounts", "rw_rules", "workdir", "visible", "masked")
        what = "the step's world file"
        doc = landlock.document(text, keys=keys, version=cls.VERSION, what=what)
        try:
            mounts = doc["mounts"]
            if not isinstance(mounts, list):
                raise landlock.PolicyError("'mounts' is not a list")
            out = []
            for m in mounts:
                if not isinstance(m, list) or len(m) != 3 or m[0] not in KINDS or not isinstance(m[1], str):
                    raise landlock.PolicyError(f"'mounts' holds {m!r}, not a [kind, source, target] mount")
                out.append(Mount(m[0], m[1], landlock.paths([m[2]], "mounts")[0]))
            workdir = landlock.paths([doc["workdir"]], "workdir")[0]
            return cls(mounts=tuple(out), rw_rules=tuple(landlock.paths(doc["rw_rules"], "rw_rules")),
                       workdir=workdir, visible=tuple(landlock.paths(doc["visible"], "visible")),
                       masked=tuple(landlock.paths(doc["masked"], "masked")))
        except landlock.PolicyError as exc:
            raise landlock.PolicyError(f"{what}: {exc}") from None

    def write(self, path: str) -> str:
        """Write the world file ``path`` (read by :func:`wrap` for every command of the step)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())
        return path

    @classmethod
    def load(cls, path: str) -> World:
        """The world in the file ``path`` (:meth:`from_json`; ``PolicyError`` if unreadable)."""
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as exc:
            raise landlock.PolicyError(f"cannot read the step's world file ({exc.strerror or exc})") from None
        return cls.from_json(text)



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
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
         home_read: Sequence[str] = (), grants: Sequence[str] = ()) -> World:
    """The world of a step (:class:`World`).

    ``writable``: the roots bound read-write at their own paths (the workdir, the agent CLIs'
    state); ``read_only``: paths beneath them bound read-only over themselves; ``hidden``: paths
    masked wherever a bound tree holds them; ``home_read``: what the executor declares it reads
    (read-only); ``grants``: what the user granted the goal (read-only paths, sockets).
    """
    home = _real("~") if os.path.expanduser("~") != "~" else None
    uid = os.getuid()
    shm = os.path.join(step_dir, "shm")
    os.makedirs(shm, mode=0o700, exist_ok=True)
    masked = ["/tmp", "/run"] + ([home] if home and home != "/" else [])
    mounts: list[Mount] = [Mount("tmpfs", "", "/run")]
    resolv = _real("/etc/resolv.conf")
    if _under(resolv, "/run") and os.path.exists(resolv):  # systemd-resolved's stub: DNS still works
        mounts.append(Mount("ro", os.path.dirname(resolv), os.path.dirname(resolv)))
    mounts += [Mount("rw", tmp, "/tmp"), Mount("rw", shm, "/dev/shm"), Mount("tmpfs", "", f"/run/user/{uid}")]
    layers: list[Mount] = [Mount("tmpfs", "", home)] if home and home != "/" else []
    for path in _installs() + [_real(p) for p in [*home_read, *grants]]:
        if os.path.exists(path) and any(_under(path, m) for m in masked):
            layers.append(Mount("ro", path, path))
    layers.append(Mount("ro", step_dir, step_dir))  # the broker's socket, the step's `loopx`, its policy
    # /dev is the world's own (a devpts of its own: none of the user's terminals).
    layers += [Mount("rw", p, p) for p in writable if os.path.exists(p) and not _under(p, "/dev")]
    # Parents before what lies beneath them: a workdir that holds $HOME does not uncover it again.
    layers.sort(key=lambda m: m.target.count("/"))
    mounts += layers
    trees = [m.target for m in layers if m.kind != "tmpfs"]
    for path in read_only:
        if os.path.lexists(path) and any(_under(path, t) for t in trees):
            mounts.append(Mount("ro", path, path))
    for path in hidden:
        if os.path.lexists(path) and any(_under(path, t) for t in trees):
            mounts.append(Mount("tmpfs", "", path) if os.path.isdir(path) else Mount("ro", os.devnull, path))
    # The masks stay read-only whatever Landlock grants above them (a $HOME inside /tmp).
    mounts += [Mount("remount-ro", "", m.target) for m in layers if m.kind == "tmpfs"] + \
        [Mount("remount-ro", "", "/run")]
    first = next((p for p in writable if os.path.isdir(p) and not _under(p, "/dev")), "/")
    return World(mounts=tuple(mounts), rw_rules=(f"/run/user/{uid}",), workdir=first,
                 visible=tuple(m.target for m in layers if m.kind != "tmpfs"), masked=tuple(masked))


def file_for(policy: str | None) -> str | None:
    """The world file that goes with the Landlock policy file ``policy`` (``None`` if it has none)."""
    if not policy:
        return None
    found = os.path.splitext(policy)[0] + ".world.json"
    return found if os.path.exists(found) else None


def wrap(argv: list[str], world_file: str, cwd: str | None) -> list[str]:
    """``argv`` started inside the world of ``world_file`` (a ``bwrap`` command line).

    Raises ``OSError`` when bubblewrap is gone, or the world file is not one this LoopX wrote
    (:class:`loopx.sandbox.landlock.PolicyError`): the command must not start without its world.
    """
    program = bwrap()
    if program is None:
        raise OSError("bubblewrap (bwrap) is not available to build the step's world")
    try:
        world = World.load(world_file)
    except landlock.PolicyError as exc:
        raise OSError(f"cannot build the step's world: {exc}") from None
    args = [program, *_base_args()]
    for mount in world.mounts:
        args += mount.args()
    args += ["--chdir", world.chdir_for(_real(cwd or os.getcwd()))]
    return [*args, "--", *argv]

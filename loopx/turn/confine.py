"""Confinement of a governed step: what the agent's process tree may read, write and reach.

One :class:`Step` per turn holds the policy (:meth:`Step.policy`, a
:class:`loopx.sandbox.confine_policy.Policy`, written to the step's ``policy.json``);
:func:`loopx.sandbox.process.run_command` applies it (the one place LoopX starts a child) to every child
started while the step is active: the watcher it starts reads that file and enforces Landlock
(:mod:`loopx.sandbox.landlock`) on itself just before it starts the command, so the agent and everything
it starts inherit it. The policy:

* **writes** only beneath the goal's workdir (or worktree), a private temp dir (``TMPDIR``), the
  goal's own agent-CLI directories (``CLAUDE_CONFIG_DIR`` / ``CODEX_HOME`` of its turns,
  :mod:`loopx.turn.executors.homes`; the user's ``~/.claude``, ``~/.claude.json`` and ``~/.codex`` are
  read-only) and a few devices (``/dev/null``...);
* **reads** everywhere except LoopX's config directory (``platformdirs.user_config_dir("loopx")``,
  where the integrity key lives), the SQLite registry file and its journal files, PostgreSQL
  password files, every goal's agent-CLI directories but its own, and LoopX's private root
  (:func:`private_root`: where LoopX runs code on the step's behalf, e.g. Issue-Fix's tests;
  :mod:`loopx.turn.private_run`). Landlock is an allow-list, so
  a path is hidden by granting read on every sibling along the way from ``/`` to it
  (:func:`cover`); the directories on the way (``/``, the home directory...) can then be passed
  through but not listed;
* the registry's directory and git's metadata (the ``.git`` directory, a worktree's git directory
  and ``.git`` file, the repository's common directory: :func:`_git_paths`) are never writable;
* with a PostgreSQL registry, TCP connections to its port are denied (Landlock ABI >= 4), and
  the registry URL and ``PG*`` variables never reach the agent's environment.

Every command of the step runs inside a world built from an allowlist (:mod:`loopx.sandbox.world`:
bubblewrap; private ``/tmp``, ``/dev/shm`` and ``/run``, of ``$HOME`` only what is declared, its
own PID namespace), Landlock enforced inside it; without bubblewrap a turn is refused unless the
user chose Landlock alone (``LOOPX_CONFINE_BACKEND=landlock``).

The agent reaches the registry only through the turn's broker (:mod:`loopx.turn.broker`), whose
address is in the environment. Confinement **fails closed**: :func:`check` refuses a turn
(``confinement_unavailable``) where Landlock or the world is missing, unless the user opted in with
``--unconfined`` or ``LOOPX_UNCONFINED=1`` in the environment of the ``loopx`` they run (the
agent cannot set it for LoopX: a variable it sets reaches only processes it starts, which are
already confined). A turn that ran unconfined says so in its evidence and hand-off.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

from loopx.sandbox.confine_policy import Policy, Rule
from loopx.values.errors import LoopxError
from loopx.sandbox.process import ENV_STEP_BIN, SECRET_VARS

if TYPE_CHECKING:
    from loopx.turn.broker import Broker
    from loopx.sandbox.world import World

ENV_UNCONFINED = "LOOPX_UNCONFINED"
#: ``none`` makes LoopX behave as if the kernel had no Landlock (it can only make a turn refuse).
ENV_BACKEND = "LOOPX_CONFINE_BACKEND"
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts",
           "/dev/shm")


def backend() -> str | None:
    """The confinement this machine offers, or ``None``: ``"bwrap"`` (Landlock inside a world built
    by bubblewrap, :mod:`loopx.sandbox.world`), or ``"landlock"`` (Landlock alone, no world) only when the
    user asked for it with ``LOOPX_CONFINE_BACKEND=landlock``."""
    chosen = os.environ.get(ENV_BACKEND, "")
    if chosen == "none" or not sys.platform.startswith("linux"):
        return None
    from loopx.sandbox import landlock

    if landlock.abi() < 1:
        return None
    if chosen == "landlock":
        return "landlock"
    from loopx.sandbox import world

    return "bwrap" if world.bwrap() else None


def _landlock_abi() -> int:
    from loopx.sandbox import landlock

    return landlock.abi()


def opted_out(flag: bool = False) -> bool:
    """True when the user asked for unconfined steps (``--unconfined`` or ``LOOPX_UNCONFINED=1``)."""
    return bool(flag) or os.environ.get(ENV_UNCONFINED, "") in ("1", "true", "yes")


def check(unconfined: bool = False) -> str | None:
    """The backend to use; ``confinement_unavailable`` when there is none and the user did not opt out.

    Returns ``None`` for an unconfined step (the user's choice).
    """
    if opted_out(unconfined):
        return None
    found = backend()
    if found is None:
        why = "Landlock is not available in this kernel" if sys.platform.startswith("linux") else \
            f"LoopX confines steps with Linux Landlock, not available on {sys.platform}"
        if os.environ.get(ENV_BACKEND) == "none":
            why = f"{ENV_BACKEND}=none"
        elif sys.platform.startswith("linux") and _landlock_abi() >= 1:
            why = ("bubblewrap (bwrap) is not installed or cannot build the step's world here; install the "
                   f"`bubblewrap` package, or accept Landlock alone: {ENV_BACKEND}=landlock")
        raise LoopxError("confinement_unavailable",
                         f"cannot confine the agent ({why}); refusing to run the step. Run it unconfined only "
                         "if you trust the agent: --unconfined or LOOPX_UNCONFINED=1 (docs/security.md)")
    return found


def config_dir() -> str:
    """LoopX's config directory (the integrity key lives beneath it): never readable inside a step."""
    from loopx.values import userdirs

    return userdirs.config_dir()  # the directory keys.key_dir() is in: one answer for both


def private_root() -> str:
    """LoopX's private root, ``platformdirs.user_cache_dir("loopx")/private``: where LoopX runs
    commands on a step's behalf (:mod:`loopx.turn.private_run`); hidden from every step."""
    from loopx.values import userdirs

    return os.path.join(userdirs.cache_dir(), "private")


def ensure_root() -> str:
    """Make the private root (mode 0700) and return its real path."""
    root = private_root()
    os.makedirs(root, mode=0o700, exist_ok=True)
    return os.path.realpath(root)


def real_path(path: str) -> str:
    """``path`` with ``~`` expanded, made absolute, every symbolic link resolved."""
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def cover(root: str, excluded: list[str]) -> tuple[list[str], list[str]]:
    """``(paths, passed)``: paths whose subtrees together hold all of ``root`` except ``excluded``,
    and the directories passed on the way (an excluded path's ancestors below ``root``).

    Landlock rules apply to a whole subtree, so to leave a path out every sibling along the way
    to it gets a rule of its own. A symbolic link is followed only when its target holds no
    excluded path and lies in none (a link into a hidden directory is left out).
    """
    inside = [e for e in excluded if _under(e, root)]
    if not inside:
        return [root], []
    if root in inside or not os.path.isdir(root) or os.path.islink(root):
        return [], []
    paths, passed = [], [root]
    try:
        names = os.listdir(root)
    except OSError:
        return [], passed
    for name in names:
        child = os.path.join(root, name)
        if os.path.islink(child):
            target = os.path.realpath(child)
            if any(_under(e, target) or _under(target, e) for e in excluded):
                continue
        sub, way = cover(child, inside)
        paths += sub
        passed += way
    return paths, passed


def _git_paths(workdir: str) -> tuple[list[str], list[str]]:
    """``(directories, links)``: the git metadata of the repository ``workdir`` is in, all of it
    read-only inside a step (the agent edits files; LoopX commits).

    ``directories`` are the top's ``.git`` directory, the worktree's git directory and the
    repository's common directory (refs, objects, ``commondir``, ``gitdir``, config, ``info``,
    hooks, ``worktrees/``, ``packed-refs``): git run later by LoopX or by the user reads them, so
    a step that could write them could steer that git (a ``commondir`` pointing at a config with a
    ``filter.*.clean``, an ``fsmonitor``, a moved branch, a ``refs/replace/`` entry). ``links``
    is a linked worktree's ``.git`` file. Beyond the workdir they are read-only anyway (no rule
    grants a write there); beneath it they are bind-mounted read-only. The paths are read from
    the files git keeps (which a step cannot change any more); nothing is created here.
    """
    probe, top = workdir, None
    while True:
        if os.path.lexists(os.path.join(probe, ".git")):
            top = probe
            break
        parent = os.path.dirname(probe)
        if parent == probe:
            return [], []
        probe = parent
    dotgit = os.path.join(top, ".git")
    gitdir: str | None = dotgit
    links: list[str] = []
    if os.path.isfile(dotgit) or os.path.islink(dotgit):
        links.append(dotgit)
        try:
            with open(dotgit, encoding="utf-8") as f:
                line = f.read(4096).strip()
        except OSError:
            line = ""
        gitdir = os.path.normpath(os.path.join(top, line.split(":", 1)[1].strip())) \
            if line.startswith("gitdir:") else None
    dirs = [] if gitdir is None else [gitdir]
    if gitdir is not None:
        try:
            with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
                dirs.append(os.path.normpath(os.path.join(gitdir, f.read(4096).strip())))
        except OSError:
            pass
    if not links:
        dirs.append(dotgit)
    return sorted({real_path(d) for d in dirs if os.path.isdir(d)}), [os.path.abspath(p) for p in links]


def registry_paths(url: str) -> tuple[list[str], list[str], list[int]]:
    """``(hidden, read_only, denied_ports)`` for the registry at ``url``."""
    if "://" in url and not url.lower().startswith("sqlite"):
        from urllib.parse import urlsplit

        try:
            port = urlsplit(url).port or 5432
        except ValueError:
            port = 5432
        return [], [], [port]
    from loopx.store.sqlite import path_from_url

    path = real_path(str(path_from_url(url)))
    hidden = [path + suffix for suffix in ("", "-wal", "-shm", "-journal", "-lock")]
    # A repair's backups beside it hold the whole registry (loopx/domain/backup.py): FILE.bak-TIME
    # and, while one is written, .FILE.bak-TIME.part. Those there when the step starts (one made
    # later falls under no Landlock rule, as the directory gets none; the world has no such directory).
    import glob

    folder, name = os.path.split(path)
    hidden += sorted(glob.glob(glob.escape(path) + ".bak-*")
                     + glob.glob(os.path.join(glob.escape(folder), "." + glob.escape(name) + ".bak-*")))
    return hidden, [folder], []


def _remove_dead_steps_dirs() -> None:
    """Remove the private directories of turns whose process is gone (a SIGKILLed ``loopx turn``
    cannot remove its own); cheap: one listing of the temp directory."""
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith("loopx-step-")]
    except OSError:
        return
    for name in names:
        pid = name[len("loopx-step-"):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except OSError:
            pass  # alive, or not ours to ask about


class Step:
    """The confinement of one turn: policy, private directory, environment; see the module docstring.

    ``backend`` ``None`` means the user chose to run unconfined: the environment is still
    scrubbed and the broker still stamps identity, only the OS policy is missing.
    """

    def __init__(self, *, registry_url: str, workdir: str, backend: str | None,
                 broker_env: dict[str, str] | None = None, agent_homes: list[str] | None = None,
                 agent_homes_root: str | None = None, home_read: Sequence[str] = (), grants: Sequence[str] = ()):
        """``home_read``: what of ``$HOME`` the executor declares it reads; ``grants``: paths (or
        sockets) the user granted the goal; both read-only in the step's world (:mod:`loopx.sandbox.world`)."""
        self.backend = backend
        # The goal's own agent-CLI directories (writable) and where every goal's live (hidden).
        self.agent_homes = list(agent_homes or [])
        self.agent_homes_root = agent_homes_root
        self.home_read, self.grants = list(home_read), list(grants)
        _remove_dead_steps_dirs()
        # The pid in the name lets a later turn remove what a killed one could not.
        self.dir = tempfile.mkdtemp(prefix=f"loopx-step-{os.getpid()}-")
        self.tmp = os.path.join(self.dir, "tmp")
        os.mkdir(self.tmp, 0o700)
        from loopx.sandbox.broker_client import write_client

        # The step's own `loopx` (the broker's client alone), first on its PATH: read-only to it.
        self.bin = write_client(self.dir)
        self.workdir = real_path(workdir)
        self.registry_url = registry_url
        self.broker_env = dict(broker_env or {})
        self.broker: Broker | None = None  # the turn's, once started
        self.policy_file: str | None = None
        self.world: World | None = None
        self.rules = 0
        if backend is not None:
            policy = self.policy()
            if self.world is not None:
                # Beside the policy: loopx.sandbox.process wraps every command of the step in this world.
                self.world.write(os.path.join(self.dir, "policy.world.json"))
            self.rules = len(policy.rules)
            self.policy_file = policy.write(os.path.join(self.dir, "policy.json"))

    @property
    def confined(self) -> bool:
        """Whether children run under an OS policy."""
        return self.backend is not None

    def writable(self) -> list[str]:
        """The roots the agent may write beneath (before the protected paths are taken out).

        The agent CLIs write only their goal's own directories (``agent_homes``,
        :mod:`loopx.turn.executors.homes`); the user's ``~/.claude``, ``~/.claude.json`` and
        ``~/.codex`` / ``$CODEX_HOME`` are read by the user's own later sessions (shell snapshots,
        rules, hooks, ``AGENTS.override.md``) and get no write rule."""
        roots = [self.workdir, self.tmp, *self.agent_homes]
        roots += [d for d in DEVICES if os.path.exists(d)]
        out: list[str] = []
        for r in roots:
            r = real_path(r)
            if os.path.exists(r) and not any(_under(r, o) for o in out):
                out = [o for o in out if not _under(o, r)] + [r]
        return out

    def policy(self) -> Policy:
        """The step's Landlock policy (and, with bubblewrap, its world in ``self.world``)."""
        hidden_reg, ro_reg, ports = registry_paths(self.registry_url)
        home = os.path.expanduser("~")
        # LoopX's private root: the runs LoopX makes on the step's behalf (loopx.turn.private_run).
        hidden = [real_path(config_dir()), *hidden_reg, real_path(os.path.join(home, ".pgpass")),
                  real_path(os.path.join(home, ".pg_service.conf")), ensure_root()]
        if self.agent_homes_root:
            # Other goals' agent-CLI directories (their transcripts, their copy of the login);
            # this goal's own are granted below, and a rule on them reaches beneath a hidden parent.
            hidden.append(real_path(self.agent_homes_root))
        if os.environ.get("PGPASSFILE"):
            hidden.append(real_path(os.environ["PGPASSFILE"]))
        git_dirs, git_links = _git_paths(self.workdir)
        # The directories on the way to a hidden path get no rule at all: a rule there would reach
        # the hidden path beneath (Landlock rules hold for a whole subtree), so they cannot be listed.
        read, _passed = cover("/", hidden)
        base = [Rule(p, "r") for p in read]
        roots = self.writable()

        def writes(excluded_git: list[str]) -> list[Rule]:
            out: list[Rule] = []
            for root in roots:
                # The registry's directory is never writable: left out of a root that holds it,
                # and a root that *is* it is split into its entries (the registry files left
                # out), so nothing can be created, removed or renamed beside the registry.
                # The step's own directory (the policy file) is never writable; only its tmp/ is.
                excluded = hidden + excluded_git + [self.dir] + [d for d in ro_reg if d != root]
                paths, _ = cover(root, [p for p in excluded if not _under(self.tmp, p)])
                out += [Rule(p, "rw") for p in paths]
            return out

        # Git's metadata inside a writable root is kept read-only by bind mounts (a mount point
        # cannot be renamed or replaced either); where no mount namespace can be had, by leaving
        # it out (then nothing can be created at the top of the workdir). A linked worktree's ``.git`` file is
        # left writable in that fallback (else no new file at the top of the worktree): LoopX
        # never follows it (Issue-Fix passes the git directories it checked explicitly).
        read_only = git_dirs + git_links
        inside = [p for p in read_only if os.path.lexists(p) and any(_under(p, r) for r in roots)]
        outside = [p for p in read_only if p not in inside]
        rules = base + writes(outside)
        if self.backend == "bwrap":
            from loopx.sandbox import world

            # The world binds the read-only paths itself (and masks the hidden ones in its binds).
            self.world = world.plan(step_dir=self.dir, tmp=self.tmp, writable=roots,
                                    read_only=inside + [d for d in ro_reg if any(_under(d, r) for r in roots)],
                                    hidden=hidden, grants=self.grants,
                                    # The repository a workspace is a worktree of (its common
                                    # directory) lies outside the workdir: git in the step reads it.
                                    home_read=self.home_read + [p for p in outside if p in git_dirs])
            rules += [Rule(p, "rw") for p in self.world.rw_rules]
            return Policy(rules=tuple(rules), deny_tcp=tuple(ports), world=True)
        if inside:
            return Policy(rules=tuple(rules), deny_tcp=tuple(ports), read_only=tuple(inside),
                          rules_unpinned=tuple(base + writes([p for p in read_only if p not in git_links])))
        return Policy(rules=tuple(rules), deny_tcp=tuple(ports))

    def env(self) -> dict[str, str | None]:
        """What a confined child's environment gets (``None`` removes a variable)."""
        out: dict[str, str | None] = {k: None for k in os.environ if k.startswith("LOOPX_") or k in SECRET_VARS}
        out.update({"TMPDIR": self.tmp, "TMP": self.tmp, "TEMP": self.tmp, **self.broker_env})
        if self.bin:
            out[ENV_STEP_BIN] = self.bin  # put first on the child's PATH (loopx.sandbox.process)
        return out

    def describe(self) -> str:
        """This step as ``LOOPX_STEP`` holds it (see :data:`loopx.sandbox.process.ENV_STEP`)."""
        # roots: what a file the step names may lie beneath (loopx.sandbox.safe_open.step_roots)
        return json.dumps({"policy": self.policy_file, "env": self.env(), "roots": self.writable()})

    def close(self) -> None:
        """Remove the step's private directory."""
        shutil.rmtree(self.dir, ignore_errors=True)


SANDBOX_EXEC_PROFILE = r"""(version 1)
; LoopX step profile for macOS sandbox-exec (docs/security.md). Parameters (-D):
;   WORKDIR  the goal's workdir     TMPDIR  the step's private temp dir
;   HOME     the user's home        CONFIG  LoopX's config dir (the key)
;   REGDIR   the registry's directory
;   AGENTHOME  the goal's agent-CLI directories (loopx.turn.executors.homes)
(allow default)
(deny file-write*)
(allow file-write*
  (subpath (param "WORKDIR"))
  (subpath (param "TMPDIR"))
  (subpath (param "AGENTHOME"))
  (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/ttys[0-9]+$"))
(deny file-write*
  (subpath (string-append (param "WORKDIR") "/.git"))
  (subpath (param "REGDIR")))
(deny file-read* (subpath (param "CONFIG")) (regex #"/registry\.db(-wal|-shm|-journal)?$"))
"""

"""Linux Landlock through ctypes: enforce a list of path rules (and denied TCP ports) on this process.

This module imports only the standard library and nothing of LoopX: the watcher that
:func:`loopx.sandbox.process.run_command` starts (``python -I -S``) loads it by path, reads the step's
policy file with :func:`load` and calls :func:`enforce` just before it starts the command, so the
command and every process it starts run under the policy (Landlock domains are inherited and can
never be widened).

The policy is :class:`loopx.sandbox.confine_policy.Policy` (an attrs class, built by :mod:`loopx.turn.confine`
and :mod:`loopx.turn.private_run`); what crosses to the watcher is its JSON, version :data:`VERSION`:
``{"version": 1, "rules": [[path, access], ...], "rules_unpinned": [...], "pin": [path, ...],
"read_only": [path, ...], "deny_tcp": [port, ...], "world": bool}`` where ``access`` is ``"r"``
(read files and directories, execute) or ``"rw"`` (everything). :func:`parse` is the one reader
of that JSON (the attrs class's ``from_json`` uses it too): it refuses another version, a missing
or unknown key and a value of the wrong type (:class:`PolicyError`), so a policy LoopX did not
write is never enforced half-understood - the watcher then starts nothing (fails closed). It is
hand-written, not attrs: the watcher runs without site-packages, and importing attrs and creating
the classes there would cost more instructions than the whole watcher does (docs/security.md,
"The policy is one value"). Landlock is an allow-list: whatever
no rule grants is denied (:mod:`loopx.turn.confine` builds the list).

Landlock cannot keep one directory read-only beneath a writable one (a rule holds for a whole
subtree). So, where a private mount namespace can be had (root, or an unprivileged user
namespace), ``pin`` paths are bind-mounted onto themselves (a mount point cannot be renamed or
removed) and ``read_only`` paths are bind-mounted read-only, before Landlock is enforced (which
then forbids any change of mounts); otherwise ``rules_unpinned`` is used, which leaves those
paths out by listing their siblings instead.
"""

from __future__ import annotations

import os

#: A name type checkers treat as true: the types below are for them alone (the watcher never
#: imports ``typing``: it costs it instructions for nothing).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from typing import Literal, TypedDict

    Access = Literal["r", "rw"]

    class PolicyDoc(TypedDict):
        """The policy file, parsed and checked (:func:`parse`)."""

        version: int
        rules: list[tuple[str, Access]]
        rules_unpinned: list[tuple[str, Access]]
        pin: list[str]
        read_only: list[str]
        deny_tcp: list[int]
        world: bool

#: The version of the policy file this LoopX writes and reads; a file of any other is refused.
VERSION = 1
#: Every key of the policy file, each required: a key more or less is a file LoopX did not write.
KEYS = ("version", "rules", "rules_unpinned", "pin", "read_only", "deny_tcp", "world")


class PolicyError(ValueError):
    """A policy file this LoopX does not know (another version, a key more or less, a value of the
    wrong type): nothing is enforced from it, so nothing may start."""


def document(text: str | bytes, *, keys: tuple[str, ...], version: int, what: str) -> dict[str, object]:
    """The JSON object ``text``, checked to hold exactly ``keys`` and ``"version": version``.

    Raises :class:`PolicyError` naming ``what`` and the first thing wrong. Shared by the world's
    file (:mod:`loopx.sandbox.world`).
    """
    import json

    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PolicyError(f"{what} is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise PolicyError(f"{what} is not a JSON object")
    found = doc.get("version")
    if type(found) is not int or found != version:
        raise PolicyError(f"{what} has version {found!r}; this LoopX reads version {version} only")
    unknown = sorted(set(doc) - set(keys))
    if unknown:
        raise PolicyError(f"{what} has unknown keys: {', '.join(map(repr, unknown))}")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise PolicyError(f"{what} lacks keys: {', '.join(map(repr, missing))}")
    return doc


def paths(value: object, key: str) -> list[str]:
    """``value`` as a list of absolute paths (``PolicyError`` naming ``key`` otherwise)."""
    if not isinstance(value, list):
        raise PolicyError(f"{key!r} is not a list")
    for path in value:
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise PolicyError(f"{key!r} holds {path!r}, not an absolute path")
    return list(value)


def _rules(value: object, key: str) -> list[tuple[str, Access]]:
    if not isinstance(value, list):
        raise PolicyError(f"{key!r} is not a list")
    out: list[tuple[str, Access]] = []
    for rule in value:
        if not isinstance(rule, list) or len(rule) != 2 or rule[1] not in ("r", "rw"):
            raise PolicyError(f"{key!r} holds {rule!r}, not a [path, \"r\" or \"rw\"] pair")
        path = paths(rule[:1], key)[0]
        out.append((path, "r" if rule[1] == "r" else "rw"))
    return out


def _ports(value: object, key: str) -> list[int]:
    if not isinstance(value, list) or not all(type(p) is int and 0 < p < 65536 for p in value):
        raise PolicyError(f"{key!r} is not a list of TCP ports (1-65535): {value!r}")
    return list(value)


def parse(text: str | bytes) -> PolicyDoc:
    """The policy file's JSON, checked (see the module docstring); :class:`PolicyError` if it is
    not exactly what this LoopX writes."""
    what = "the step's policy file"
    doc = document(text, keys=KEYS, version=VERSION, what=what)
    try:
        if type(doc["world"]) is not bool:
            raise PolicyError(f"'world' is not true or false: {doc['world']!r}")
        return {"version": VERSION, "rules": _rules(doc["rules"], "rules"),
                "rules_unpinned": _rules(doc["rules_unpinned"], "rules_unpinned"),
                "pin": paths(doc["pin"], "pin"), "read_only": paths(doc["read_only"], "read_only"),
                "deny_tcp": _ports(doc["deny_tcp"], "deny_tcp"), "world": doc["world"]}
    except PolicyError as exc:
        raise PolicyError(f"{what}: {exc}") from None


def load(path: str) -> PolicyDoc:
    """The policy file at ``path``, checked (:func:`parse`); ``PolicyError`` if unreadable."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise PolicyError(f"cannot read the step's policy file ({exc.strerror or exc})") from None
    return parse(text)


# Syscall numbers are the same on every architecture (the unified table).
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_VERSION_FLAG = 1
_RULE_PATH, _RULE_PORT = 1, 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

#: Every filesystem right each ABI knows (a right the kernel does not know cannot be handled).
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only ones a file rule may hold
READ = EXECUTE | READ_FILE | READ_DIR
ACCESS = {"r": READ, "rw": (1 << 16) - 1}


def _libc() -> ctypes.CDLL:
    # ctypes is imported where Landlock is used, not with this module (its checks need none).
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or disabled)."""
    import ctypes

    try:
        libc = _libc()
        version = libc.syscall(ctypes.c_long(_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _pin(policy: PolicyDoc) -> bool:
    """Bind-mount ``pin`` and ``read_only`` paths in a private mount namespace; False if impossible."""
    libc = _libc()
    pins, ro = policy.get("pin") or [], policy.get("read_only") or []
    if not pins and not ro:
        return True
    newns, newuser = 0x20000, 0x10000000
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(newns) != 0:
        if libc.unshare(newuser | newns) != 0:
            return False
        try:  # keep our own uid and gid inside the new user namespace
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError:
            return False
    bind, rec, remount, rdonly, private = 4096, 16384, 32, 1, 1 << 18
    mount = libc.mount
    if mount(None, b"/", None, rec | private, None) != 0:
        return False
    for path in pins:
        p = path.encode()
        if mount(p, p, None, bind, None) != 0:
            return False
    for path in ro:
        p = path.encode()
        if mount(p, p, None, bind, None) != 0 or mount(None, p, None, remount | bind | rdonly, None) != 0:
            return False
    return True


def enforce(policy: PolicyDoc) -> int:
    """Restrict this process (and all it starts) to ``policy`` (:func:`load`'s answer, or
    :meth:`loopx.sandbox.confine_policy.Policy.enforce`); returns the ABI used.

    Raises ``OSError`` when Landlock is missing or a step fails: the caller must not start the
    command then (confinement fails closed).
    """
    import ctypes

    libc = _libc()
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available in this kernel")
    rules = policy.get("rules") or []
    if (policy.get("pin") or policy.get("read_only")) and not _pin(policy):
        rules = policy.get("rules_unpinned") or []
    handled_fs = _FS_BY_ABI.get(version, _FS_BY_ABI[5])
    deny = [int(p) for p in policy.get("deny_tcp") or []]
    handled_net = CONNECT_TCP if deny and version >= 4 else 0
    # Signals, and connections to abstract unix sockets (X11's, D-Bus's), only within the step.
    scoped = SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if version >= 6 else 0

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    class NetPort(ctypes.Structure):
        _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]

    attr = RulesetAttr(handled_fs, handled_net, scoped)
    # Older ABIs take a shorter struct (no net, no scope): pass only what the kernel knows.
    size = ctypes.sizeof(attr) if version >= 6 else (16 if version >= 4 else 8)
    ruleset = libc.syscall(ctypes.c_long(_CREATE), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path, access in rules:
            mask = ACCESS[access] & handled_fs
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone since the policy was built: nothing to grant
            try:
                if not os.path.isdir(path):
                    mask &= _FILE_RIGHTS
                if not mask:
                    continue
                rule = PathBeneath(mask, fd)
                if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if handled_net:
            # Net rules are an allow-list of ports too: every port but the denied ones.
            denied = set(deny)
            net = NetPort(CONNECT_TCP, 0)
            add, ref = libc.syscall, ctypes.byref(net)
            args = (ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PORT))
            for port in range(1, 65536):
                if port in denied:
                    continue
                net.port = port
                if add(*args, ref, ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for port {port}")
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required to restrict oneself
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(_RESTRICT), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return version

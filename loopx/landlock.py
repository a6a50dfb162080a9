"""Linux Landlock through ctypes: enforce a list of path rules (and denied TCP ports) on this process.

This module imports only the standard library and nothing of LoopX: the watcher that
:func:`loopx.process.run_command` starts (``python -I -S``) loads it by path and calls
:func:`enforce` just before it starts the command, so the command and every process it starts
run under the policy (Landlock domains are inherited and can never be widened).

A policy is a dict: ``{"rules": [[path, access], ...], "deny_tcp": [port, ...], "pin": [path,
...], "read_only": [path, ...], "rules_unpinned": [...]}`` where ``access`` is ``"r"`` (read
files and directories, execute) or ``"rw"`` (everything). Landlock is an allow-list: whatever no
rule grants is denied (:mod:`loopx.confine` builds the list).

Landlock cannot keep one directory read-only beneath a writable one (a rule holds for a whole
subtree). So, where a private mount namespace can be had (root, or an unprivileged user
namespace), ``pin`` paths are bind-mounted onto themselves (a mount point cannot be renamed or
removed) and ``read_only`` paths are bind-mounted read-only, before Landlock is enforced (which
then forbids any change of mounts); otherwise ``rules_unpinned`` is used, which leaves those
paths out by listing their siblings instead.
"""

from __future__ import annotations

import os

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


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return ctypes, libc


def abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or disabled)."""
    try:
        ctypes, libc = _libc()
        version = libc.syscall(ctypes.c_long(_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _pin(policy: dict) -> bool:
    """Bind-mount ``pin`` and ``read_only`` paths in a private mount namespace; False if impossible."""
    ctypes, libc = _libc()
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


def enforce(policy: dict) -> int:
    """Restrict this process (and all it starts) to ``policy``; returns the ABI used.

    Raises ``OSError`` when Landlock is missing or a step fails: the caller must not start the
    command then (confinement fails closed).
    """
    ctypes, libc = _libc()
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
            rule = NetPort(CONNECT_TCP, 0)
            add, ref = libc.syscall, ctypes.byref(rule)
            args = (ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PORT))
            for port in range(1, 65536):
                if port in denied:
                    continue
                rule.port = port
                if add(*args, ref, ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for port {port}")
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required to restrict oneself
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(_RESTRICT), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return version

"""The watcher every command :func:`loopx.sandbox.process.run_command` starts runs under, and how it is started.

On Linux a command runs under a small watcher (:data:`WATCHER`), a child subreaper: a descendant
that started a session of its own (``setsid``) and lost its parent is re-parented to the watcher
instead of PID 1, so the time-out (and ``reap``) reach it too, and if the process that called
``run_command`` is killed, the watcher ends the whole tree. A confined command's watcher enforces
the step's Landlock policy (:mod:`loopx.sandbox.landlock`, loaded by path: it reads the policy file,
refusing one this LoopX did not write, and enforces it) before the command exists, inside the
step's world when the policy has one (:mod:`loopx.sandbox.world`). Like :mod:`loopx.sandbox.process` it
imports nothing of LoopX at module level.
"""

from __future__ import annotations

import os
import sys

LANDLOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "landlock.py")

#: The watcher every command runs under on Linux (``python -I -S -c WATCHER REAP PROGRAM ARGS...``).
#: It makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so a descendant that
#: left the process group and the session (``setsid``, a double fork) and lost its parent is
#: re-parented to the watcher, not to PID 1, and stays findable. It starts the command, reaps
#: whatever is re-parented to it, and exits with the command's status (re-raising its signal).
#: It kills every descendant it has - TERM, then KILL a second later - when it is told to stop
#: (the time-out's SIGTERM), when the process that started it is gone (``loopx`` killed with
#: SIGKILL), and, with REAP=1, when the command ends. Starting it costs about 15 ms of CPU a
#: command (an interpreter without site, and ctypes), against minutes-long steps and agent turns.
WATCHER = r"""
import os, signal, sys, time
reap, policy, argv, me, parent = sys.argv[1] == "1", sys.argv[2], sys.argv[3:], os.getpid(), os.getppid()
try:
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
except Exception:
    pass
limits = os.environ.pop("LOOPX_STEP_LIMITS", None)
if limits:
    # The step's limits (loopx/sandbox/limits.py): join its cgroups and set its rlimits before the
    # command exists, so it and everything it starts count; if that fails nothing is started.
    try:
        for line in limits.split("\n"):
            if line.startswith("R "):
                import resource
                res, soft, hard = map(int, line.split()[1:])
                resource.setrlimit(res, (soft, hard))
            else:
                with open(line, "w") as f:
                    f.write(str(me))
    except Exception as exc:
        os.write(2, ("loopx: cannot apply the step's limits to %r: %s [step_failed]\n" % (argv[0], exc)).encode())
        os._exit(126)
if policy != "-":
    # Confine this watcher, and so the command and all it starts, before the command exists;
    # if that fails nothing is started (confinement fails closed), nor if the policy file is not
    # exactly one this LoopX writes (load checks its version, keys and types).
    try:
        ns = {"__name__": "loopx_landlock"}
        from importlib.machinery import SourceFileLoader  # its cached bytecode: no compile() per command
        exec(SourceFileLoader("loopx_landlock", LANDLOCK).get_code("loopx_landlock"), ns)
        doc = ns["load"](policy)
        if doc["world"] and me > 2:  # pid 2 under the world's init: never run outside it
            raise OSError("the step's world (loopx.sandbox.world) was not built")
        ns["enforce"](doc)
    except Exception as exc:
        os.write(2, ("loopx: cannot confine %r: %s [confinement_unavailable]\n" % (argv[0], exc)).encode())
        os._exit(126)
sigs = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
try:
    child = os.posix_spawnp(argv[0], argv, os.environ, setsigmask=())  # the command blocks nothing
except OSError as exc:
    os.write(2, ("cannot start %r: %s\n" % (argv[0], exc.strerror or exc)).encode())
    os._exit(127)

def tree():
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    stat = f.read().decode(errors="replace")
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] != "Z":
                kids.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [me]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out

def reap_all():
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == child:
            done.append(st)

def end_all():
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 1.0), (signal.SIGKILL, 1.0)):
        pids = tree()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + wait
        while tree() and time.monotonic() < end:
            reap_all()
            time.sleep(0.02)
    reap_all()

done, stop = [], None
while not done and stop is None:
    reap_all()
    if done:
        break
    info = signal.sigtimedwait(sigs, 0.25)
    if info is not None and info.si_signo != signal.SIGCHLD:
        stop = info.si_signo
    elif os.getppid() != parent:
        stop = signal.SIGKILL
if stop is None and signal.sigpending() & (sigs - {signal.SIGCHLD}):
    stop = signal.SIGTERM  # told to stop just as the command ended
if stop is not None or reap:
    end_all()
if not done:
    try:
        done.append(os.waitpid(child, 0)[1])
    except ChildProcessError:
        os._exit(1)
st = done[0]
if os.WIFSIGNALED(st):
    sig = os.WTERMSIG(st)
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    os.kill(me, sig)
    time.sleep(1)
    os._exit(128 + sig)
os._exit(os.waitstatus_to_exitcode(st) if os.WIFEXITED(st) else 1)
"""


#: Joins the cgroups named first (a count, then each ``cgroup.procs``), then runs the rest.
JOIN = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || { echo "loopx: cannot apply the '
        'step\'s limits: $1 [step_failed]" >&2; exit 126; }; shift; n=$((n-1)); done; exec "$@"')


def contained(argv: list[str], reap: bool, policy: str | None = None, cwd: str | None = None) -> list[str]:
    """``argv`` under :data:`WATCHER` (Linux: it relies on ``/proc`` and ``prctl``), confined by
    the Landlock ``policy`` file when one is given, inside the step's world when the policy has
    one (:mod:`loopx.sandbox.world`)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        if policy:
            raise OSError("a confined step needs Linux")
        return argv
    code = WATCHER.replace("LANDLOCK", repr(LANDLOCK)) if policy else WATCHER
    command = [sys.executable, "-I", "-S", "-c", code, "1" if reap else "0", policy or "-", *argv]
    if policy:
        from loopx.sandbox import world

        found = world.file_for(policy)
        if found:
            return world.wrap(command, found, cwd)
    return command


def joining_cgroups(command: list[str], limits: str) -> tuple[list[str], str]:
    """``(command run by a shell that first joins the step's cgroups, what is left of limits)``.

    ``limits`` is the step's ``LOOPX_STEP_LIMITS`` text (:mod:`loopx.sandbox.limits`): ``cgroup.procs``
    files and ``R`` (rlimit) lines. The step's world (loopx.sandbox.world) shows /sys read-only, so the
    watcher inside it cannot join the step's cgroups: a shell joins them and then becomes the
    world, so the world and all it starts count; the watcher keeps only the rlimits.
    """
    lines = limits.split("\n")
    procs = [line for line in lines if not line.startswith("R ")]
    kept = "\n".join(line for line in lines if line.startswith("R "))
    return ["/bin/sh", "-c", JOIN, "sh", str(len(procs)), *procs, *command], kept

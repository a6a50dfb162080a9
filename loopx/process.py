"""The one way LoopX runs a child process.

:func:`run_command` runs a command the way ``loopx exec`` and the agent executors need it: with
the executor's environment added, stdin closed, in its own process group, a timeout that kills
that group and every descendant, a bounded tail of the output and the sha256 of all of it.
With ``on_line`` it also hands each line of standard output to the caller as it arrives (agent
CLIs print JSON events); with ``reap`` it kills whatever the child left running once it exits.
On Linux the command runs under a small watcher (:data:`WATCHER`), a child subreaper: a
descendant that started a session of its own (``setsid``) and lost its parent is re-parented to
the watcher instead of PID 1, so the time-out (and ``reap``) reach it too, and if the process
that called ``run_command`` is killed, the watcher ends the whole tree. It sits below the domain layer (it imports nothing of LoopX), so
``loopx exec`` (``loopx.actions``) and the executor providers share it without an import circle;
``loopx.executors.run_command`` is the same function.
"""

from __future__ import annotations

import contextvars
import os
import sys

TAIL_BYTES = 4096
#: The longest line of standard output handed to ``on_line`` whole; a longer line reaches it cut
#: to this length (its bytes still count in the tail and the digest): nothing reads an unbounded line.
LINE_BYTES = 4 << 20
#: How much of a step's output its file (the step's ``output_dir``, LoopX's private place) keeps.
OUTPUT_FILE_BYTES = 64 << 20

#: The confinement of the step being carried out in this context (a :class:`loopx.confine.Step`),
#: or ``None``. While it is set, every child :func:`run_command` starts runs under its policy with
#: its environment: the one place confinement is applied.
STEP: contextvars.ContextVar = contextvars.ContextVar("loopx_step", default=None)
#: Variables that carry registry credentials; never passed to a confined child.
SECRET_VARS = ("PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSERVICE", "PGUSER", "PGHOST", "PGHOSTADDR",
               "PGPORT", "PGDATABASE", "PGSSLKEY", "PGSSLCERT", "PGOPTIONS")
#: A step described for a ``loopx`` process the broker starts outside confinement (JSON:
#: ``{"policy", "env"}``), so that what that process starts is confined like the rest of the step.
#: A confined process setting it gains nothing: Landlock policies only ever narrow.
ENV_STEP = "LOOPX_STEP"
#: The directory a step's request was made in, while a broker serves it (in LoopX's process, or in
#: the ``loopx`` child it starts, as ``LOOPX_CALLER_DIR``): a served command runs in LoopX's own
#: directory, but the confined children it starts (an action's command) run where the step asked.
CALLER_DIR: contextvars.ContextVar = contextvars.ContextVar("loopx_caller_dir", default=None)
ENV_CALLER_DIR = "LOOPX_CALLER_DIR"
#: The step's own ``loopx`` client's directory (:func:`loopx.broker_client.write_client`), put
#: first on a confined child's ``PATH``.
ENV_STEP_BIN = "LOOPX_STEP_BIN"
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
import os, sys, time
import _signal as signal  # the C module: `signal` imports enum, a third of this watcher's start-up
reap, policy, argv, me, parent = sys.argv[1] == "1", sys.argv[2], sys.argv[3:], os.getpid(), os.getppid()
try:
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
except Exception:
    pass
limits = os.environ.pop("LOOPX_STEP_LIMITS", None)
if limits:
    # The step's limits (loopx/limits.py): join its cgroups and set its rlimits before the
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
    # if that fails nothing is started (confinement fails closed).
    try:
        import json
        ns = {"__name__": "loopx_landlock"}
        exec(compile(open(LANDLOCK).read(), LANDLOCK, "exec"), ns)
        with open(policy) as f:
            doc = json.load(f)
        if doc.get("world") and me > 2:  # pid 2 under the world's init: never run outside it
            raise OSError("the step's world (loopx.world) was not built")
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


def caller_dir() -> str | None:
    """The directory the request being served was made in (:data:`CALLER_DIR`), inside a step only."""
    if not in_step():
        return None
    found = CALLER_DIR.get() or os.environ.get(ENV_CALLER_DIR)
    return found if found and os.path.isabs(found) and os.path.isdir(found) else None


def in_step() -> bool:
    """Whether children started here run under a step's confinement (see :func:`active_step`)."""
    return STEP.get() is not None or bool(os.environ.get(ENV_STEP))


def active_step() -> tuple[str | None, dict]:
    """``(policy file or None, environment changes)`` of the step children now run under."""
    step = STEP.get()
    if step is not None:
        return step.policy_file, step.env()
    raw = os.environ.get(ENV_STEP)
    if not raw:
        return None, {}
    import json

    try:
        doc = json.loads(raw)
        return doc.get("policy"), dict(doc.get("env") or {})
    except (ValueError, AttributeError):
        # Unreadable: refuse to start anything rather than run it unconfined.
        return os.devnull + "/unreadable-step", {}


#: Joins the cgroups named first (a count, then each ``cgroup.procs``), then runs the rest.
_JOIN = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || { echo "loopx: cannot apply the '
         'step\'s limits: $1 [step_failed]" >&2; exit 126; }; shift; n=$((n-1)); done; exec "$@"')


def _contained(argv: list[str], reap: bool, policy: str | None = None, cwd: str | None = None) -> list[str]:
    """``argv`` under :data:`WATCHER` (Linux: it relies on ``/proc`` and ``prctl``), confined by
    the Landlock ``policy`` file when one is given, inside the step's world when the policy has
    one (:mod:`loopx.world`)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        if policy:
            raise OSError("a confined step needs Linux")
        return argv
    code = WATCHER.replace("LANDLOCK", repr(LANDLOCK)) if policy else WATCHER
    command = [sys.executable, "-I", "-S", "-c", code, "1" if reap else "0", policy or "-", *argv]
    if policy:
        from loopx import world

        found = world.file_for(policy)
        if found:
            return world.wrap(command, found, cwd)
    return command


def run_command(argv: list[str], *, env: dict[str, str], timeout: float, cwd: str | None = None,
                on_line=None, reap: bool = False, tail_bytes: int = TAIL_BYTES, confine: bool = True,
                pass_fds: tuple[int, ...] = ()) -> dict:
    """Run ``argv`` with ``env`` added to this process's environment (a value ``None`` removes a variable).

    Returns ``{"exit_code", "timed_out", "duration_seconds", "output_tail", "output_bytes",
    "output_sha256"}``. Without ``on_line`` stdout and stderr are merged in the order written;
    with it, stdout is read line by line (``on_line(str)`` per line, without the newline) and
    stderr goes only into the tail and digest. A command that cannot start gets exit code 127
    and the reason as its output. On timeout the group gets SIGTERM, then SIGKILL. ``pass_fds``:
    descriptors the command inherits (through the watcher) beside stdin, stdout and stderr.
    """
    return run_under_policy(argv, env=env, timeout=timeout, cwd=cwd, on_line=on_line, reap=reap,
                            tail_bytes=tail_bytes, confine=confine, policy=None, pass_fds=pass_fds)


def run_under_policy(argv: list[str], *, env: dict[str, str], timeout: float, cwd: str | None = None,
                     on_line=None, reap: bool = False, tail_bytes: int = TAIL_BYTES, confine: bool = True,
                     policy: str | None, pass_fds: tuple[int, ...] = ()) -> dict:
    """:func:`run_command`, confined by ``policy`` when one is given: a Landlock policy file of the
    caller's own, applied instead of the active step's and without the step's environment.

    The core's alone (:func:`loopx.private_run.run_confined` writes the policy and calls this):
    ``loopx.api`` offers ``run_command`` without it, and plugins use ``run_confined``, which
    builds the policy from what may be written.
    """
    import contextlib
    import fcntl
    import hashlib
    import signal
    import subprocess
    import threading
    import time

    digest = hashlib.sha256()
    tail = bytearray()
    total = 0
    lock = threading.Lock()
    started = time.monotonic()
    group, sink = None, None
    if policy is None:
        policy, step_env = active_step() if confine else (None, {})
        if confine and STEP.get() is not None:
            from loopx import limits

            # The step's limits and clean end (loopx/limits.py); its output goes to a file too.
            group = limits.for_step(STEP.get())
            sink = _output_file(STEP.get(), argv)
        if cwd is None and confine:
            cwd = caller_dir()  # a served request's children run where the step asked, confined
    else:
        step_env = {}
    full_env = {**os.environ, **env, **step_env}
    for key in [k for k, v in full_env.items() if v is None]:
        del full_env[key]
    if step_env.get(ENV_STEP_BIN):
        full_env["PATH"] = step_env[ENV_STEP_BIN] + os.pathsep + full_env.get("PATH", "")
    if group is not None:
        from loopx import limits

        full_env[limits.ENV] = group.env()
        # Every process of a step ends with it, setsid or not: the group finds them all, or else
        # the watcher (a subreaper) ends what it has.
        reap = reap or not group.ends_all()
    try:
        command = _contained(argv, reap, policy, cwd)
        if group is not None and command[0] != sys.executable:
            # The step's world (loopx.world) shows /sys read-only, so the watcher inside it cannot
            # join the step's cgroups: a shell joins them and then becomes the world, so the world
            # and all it starts count; the watcher keeps only the rlimits.
            procs = [line for line in full_env[limits.ENV].split("\n") if not line.startswith("R ")]
            full_env[limits.ENV] = "\n".join(line for line in full_env[limits.ENV].split("\n")
                                              if line.startswith("R "))
            command = ["/bin/sh", "-c", _JOIN, "sh", str(len(procs)), *procs, *command]
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if on_line else subprocess.STDOUT,
                                env=full_env, cwd=cwd, start_new_session=True, pass_fds=tuple(pass_fds))
    except OSError as exc:
        if group is not None:
            group.end()
        if sink is not None:
            sink.close()
        message = f"cannot start {argv[0]!r}: {exc.strerror or exc}\n".encode()
        return {"exit_code": 127, "timed_out": False, "duration_seconds": 0.0,
                "output_tail": message.decode(), "output_bytes": len(message),
                "output_sha256": "sha256:" + hashlib.sha256(message).hexdigest()}

    def keep(chunk: bytes):
        nonlocal total, sink
        with lock:
            digest.update(chunk)
            if sink is not None:
                try:
                    if total < OUTPUT_FILE_BYTES:
                        sink.write(chunk[: OUTPUT_FILE_BYTES - total])
                except OSError:  # a full disk costs the file, never the step or its tail
                    sink.close()
                    sink = None
            total += len(chunk)
            tail.extend(chunk)
            if len(tail) > tail_bytes:
                del tail[: len(tail) - tail_bytes]

    def pump_chunks(stream):
        # A test runner flushes a character a test: woken for each, this thread cost LoopX's
        # process ~30 us a wake-up (45 ms of CPU for a 1,500-test run). After a short read the
        # writer is trickling: let it gather for a moment. The pipe is made to hold 1 MiB, so a
        # command that writes fast meanwhile goes on (and the next, full, read follows at once).
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        while chunk := stream.read1(1 << 20):
            keep(chunk)
            if len(chunk) < 4096:
                time.sleep(0.01)

    def pump_lines(stream):
        # Chunks, split here: a line of gigabytes is never held (readline() would hold it whole).
        line = bytearray()
        while chunk := stream.read1(1 << 20):
            keep(chunk)
            start = 0
            while start < len(chunk):
                end = chunk.find(b"\n", start)
                piece = chunk[start:] if end < 0 else chunk[start:end]
                room = LINE_BYTES - len(line)
                if len(piece) > room:
                    piece = piece[:max(room, 0)]
                line += piece
                if end < 0:
                    break
                give(bytes(line))
                line, start = bytearray(), end + 1
        if line:
            give(bytes(line))

    def give(line: bytes):
        try:
            on_line(line.decode("utf-8", errors="replace").rstrip("\r"))
        except Exception:  # a parser's bug must not stop the pump (the child would block on a full pipe)
            pass

    readers = [threading.Thread(target=pump_lines if on_line else pump_chunks, args=(proc.stdout,), daemon=True)]
    if on_line:
        readers.append(threading.Thread(target=pump_chunks, args=(proc.stderr,), daemon=True))
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        if group is not None and group.counts_cpu():
            _wait_counting(proc, timeout, group)
        else:
            _wait(proc, timeout)
    except subprocess.TimeoutExpired:
        timed_out = group is None or group.hit is None
        kill_tree(proc.pid, grace=3.0 if timed_out else 0)
        proc.wait()
    if reap and (group is None or not group.ends_all()):
        kill_tree(proc.pid, grace=0)
    hit = None
    if group is not None:
        hit = group.reason(proc.returncode)  # read before the group is gone
        group.end()  # what left the tree (setsid, double forks) is still in the group
    # Grandchildren may keep the pipe open; after the child is gone give them a moment, then stop.
    for reader in readers:
        reader.join(timeout=5 if not timed_out else 1)
    if any(r.is_alive() for r in readers):
        _signal_group(proc.pid, signal.SIGKILL)
        for reader in readers:
            reader.join(timeout=5)
    duration = time.monotonic() - started
    with lock:
        out_tail, out_total, out_digest = bytes(tail), total, digest.hexdigest()
        if sink is not None:
            sink.close()
    out = {
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "duration_seconds": round(duration, 3),
        "output_tail": out_tail.decode("utf-8", errors="replace"),
        "output_bytes": out_total,
        "output_sha256": "sha256:" + out_digest,
    }
    if hit:
        out["limit_hit"] = hit  # a stable reason (loopx.limits.REASONS): the step failed on a limit
    return out


def _output_file(step, argv: list[str]):
    """A file in the step's ``output_dir`` (LoopX's private place, never the workspace) that the
    command's output is streamed to, or ``None`` when the step names no such place."""
    folder = getattr(step, "output_dir", None)
    if not folder:
        return None
    import itertools

    name = os.path.basename(argv[0]) or "command"
    for n in itertools.count(1):
        try:
            return open(os.path.join(folder, f"{n:03d}-{name[:40]}.log"), "xb")
        except FileExistsError:
            continue
        except OSError:
            return None


def result_of(exit_code: int, output: bytes, duration: float, *, tail_bytes: int = TAIL_BYTES) -> dict:
    """What :func:`run_command` returns, for a command that ran some other way (in this process)."""
    import hashlib

    return {"exit_code": exit_code, "timed_out": False, "duration_seconds": round(duration, 3),
            "output_tail": output[-tail_bytes:].decode("utf-8", errors="replace"), "output_bytes": len(output),
            "output_sha256": "sha256:" + hashlib.sha256(output).hexdigest()}


def _wait(proc, timeout: float | None) -> int:
    """``proc.wait(timeout)`` that wakes when the child exits, not at the next poll.

    ``Popen.wait`` with a time-out polls, sleeping up to 50 ms between looks, so each command
    ended up to 50 ms late (twice an Issue-Fix step). A pidfd (Linux 5.3) becomes readable the
    moment the child exits; where there is none, ``Popen.wait`` as before.
    """
    import select
    import subprocess
    import time

    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not poller.poll(None if deadline is None else max(0, deadline - time.monotonic()) * 1000):
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


def _wait_counting(proc, timeout: float | None, group) -> int:
    """:func:`_wait`, looking at the group's CPU time every half second: past its limit the wait
    ends as a time-out would (``group.hit`` says why)."""
    import subprocess
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 0.5 if deadline is None else min(0.5, max(0.0, deadline - time.monotonic()))
        try:
            return _wait(proc, left)
        except subprocess.TimeoutExpired:
            if group.over_cpu() or (deadline is not None and time.monotonic() >= deadline):
                raise


def kill_tree(pid: int, *, grace: float = 3.0) -> None:
    """Stop process ``pid``, its process group and every descendant (SIGTERM, then SIGKILL after ``grace``).

    Agent CLIs start tools in process groups of their own, so the group alone is not enough:
    descendants are found through ``/proc`` before anything is signalled (once a parent dies its
    children are re-parented and can no longer be traced).
    """
    import signal
    import time

    pids = {pid, *descendants(pid)}
    groups = {pid}
    for p in pids:
        try:
            groups.add(os.getpgid(p))
        except OSError:
            pass
    groups.discard(os.getpgid(0))  # never our own group
    if grace > 0:
        for g in groups:
            _signal_group(g, signal.SIGTERM)
        for p in pids:
            _signal(p, signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end and any(_alive(p) for p in pids):
            time.sleep(0.05)
    pids |= {d for p in list(pids) for d in descendants(p)}
    for g in groups:
        _signal_group(g, signal.SIGKILL)
    for p in pids:
        _signal(p, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # The command name may hold spaces and parentheses; the fields after the last ')' do not.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ")[-1][:1] != b"Z"
    except OSError:
        return False


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass

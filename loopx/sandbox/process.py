"""The one way LoopX runs a child process.

:func:`run_command` runs a command the way ``loopx exec`` and the agent executors need it: with
the executor's environment added, stdin closed, in its own process group, a timeout that kills
that group and every descendant, a bounded tail of the output and the sha256 of all of it.
With ``on_line`` it also hands each line of standard output to the caller as it arrives (agent
CLIs print JSON events); with ``reap`` it kills whatever the child left running once it exits.
On Linux the command runs under a small watcher (:mod:`loopx.sandbox.process_watcher`), a child
subreaper: a descendant that started a session of its own (``setsid``) and lost its parent is
re-parented to the watcher instead of PID 1, so the time-out (and ``reap``) reach it too, and if
the process that called ``run_command`` is killed, the watcher ends the whole tree. It sits below
the domain layer (it imports nothing of LoopX above it), so ``loopx exec`` (``loopx.domain.actions``)
and the executor providers share it without an import circle; ``loopx.turn.executors.run_command`` is
the same function.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from loopx.sandbox import limits, process_watcher

TAIL_BYTES = 4096
#: The longest line of standard output handed to ``on_line`` whole; a longer line reaches it cut
#: to this length (its bytes still count in the tail and the digest): nothing reads an unbounded line.
LINE_BYTES = 4 << 20
#: How much of a step's output its file (the step's ``output_dir``, LoopX's private place) keeps.
OUTPUT_FILE_BYTES = 64 << 20

#: The confinement of the step being carried out in this context (a :class:`loopx.turn.confine.Step`),
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
#: The step's own ``loopx`` client's directory (:func:`loopx.sandbox.broker_client.write_client`), put
#: first on a confined child's ``PATH``.
ENV_STEP_BIN = "LOOPX_STEP_BIN"


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

def run_command(argv: list[str], *, env: Mapping[str, str | None], timeout: float, cwd: str | None = None,
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




def run_under_policy(argv: list[str], *, env: Mapping[str, str | None], timeout: float, cwd: str | None = None,
                     on_line=None, reap: bool = False, tail_bytes: int = TAIL_BYTES, confine: bool = True,
                     policy: str | None, pass_fds: tuple[int, ...] = ()) -> dict:
    """:func:`run_command`, confined by ``policy`` when one is given: a Landlock policy file of the
    caller's own, applied instead of the active step's and without the step's environment.

    The core's alone (:func:`loopx.turn.private_run.run_confined` writes the policy and calls this):
    ``loopx.api`` offers ``run_command`` without it, and plugins use ``run_confined``, which
    builds the policy from what may be written.
    """
    started = time.monotonic()
    launch = _Launch.prepare(argv, env=env, cwd=cwd, reap=reap, confine=confine, policy=policy)
    try:
        proc = launch.start(argv, on_line=on_line, pass_fds=pass_fds)
    except OSError as exc:
        launch.abandon()
        message = f"cannot start {argv[0]!r}: {exc.strerror or exc}\n".encode()
        return result_of(127, message, 0.0, tail_bytes=len(message))
    output = _Output(tail_bytes, launch.sink)
    readers = output.read(proc, on_line)
    timed_out, hit = launch.wait(proc, timeout)
    output.drain(readers, proc.pid, timed_out)
    return output.result(proc.returncode, timed_out, time.monotonic() - started, hit)


class _Launch:
    """How one command is started and ended: its policy, environment and directory, and the
    active step's limits (a :class:`loopx.sandbox.limits.Group`) and output file, when there is a step."""

    def __init__(self, *, policy: str | None, env: dict, cwd: str | None, reap: bool, group=None, sink=None):
        self.policy, self.env, self.cwd, self.reap, self.group, self.sink = policy, env, cwd, reap, group, sink

    @classmethod
    def prepare(cls, argv: list[str], *, env: dict, cwd: str | None, reap: bool, confine: bool,
                policy: str | None) -> _Launch:
        """The launch of ``argv``: under ``policy`` if given, else (``confine``) under the active step's."""
        group = sink = None
        if policy is None:
            policy, step_env = active_step() if confine else (None, {})
            step = STEP.get()
            if confine and step is not None:
                # The step's limits and clean end (loopx/sandbox/limits.py); its output goes to a file too.
                group, sink = limits.for_step(step), _output_file(step, argv)
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
            full_env[limits.ENV] = group.env()
            # Every process of a step ends with it, setsid or not: the group finds them all, or else
            # the watcher (a subreaper) ends what it has.
            reap = reap or not group.ends_all()
        return cls(policy=policy, env=full_env, cwd=cwd, reap=reap, group=group, sink=sink)

    def start(self, argv: list[str], *, on_line, pass_fds) -> subprocess.Popen:
        """Start ``argv`` under its watcher (``OSError`` if it cannot be)."""
        command = process_watcher.contained(argv, self.reap, self.policy, self.cwd)
        if self.group is not None and command[0] != sys.executable:  # inside the step's world
            command, self.env[limits.ENV] = process_watcher.joining_cgroups(command, self.env[limits.ENV])
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if on_line else subprocess.STDOUT,
                                env=self.env, cwd=self.cwd, start_new_session=True, pass_fds=tuple(pass_fds))

    def abandon(self) -> None:
        """The command did not start: end the step's group for it and close its output file."""
        if self.group is not None:
            self.group.end()
        if self.sink is not None:
            self.sink.close()

    def wait(self, proc: subprocess.Popen, timeout: float) -> tuple[bool, str | None]:
        """Wait for the command (its tree killed on the time-out or a limit), then end what it
        left behind: ``(timed out, the limit it hit or None)``."""
        group, timed_out = self.group, False
        try:
            if group is not None and group.counts_cpu():
                _wait_counting(proc, timeout, group)
            else:
                _wait(proc, timeout)
        except subprocess.TimeoutExpired:
            timed_out = group is None or group.hit is None
            kill_tree(proc.pid, grace=3.0 if timed_out else 0)
            proc.wait()
        if self.reap and (group is None or not group.ends_all()):
            kill_tree(proc.pid, grace=0)
        hit = None
        if group is not None:
            hit = group.reason(proc.returncode)  # read before the group is gone
            group.end()  # what left the tree (setsid, double forks) is still in the group
        return timed_out, hit


class _Output:
    """What a command writes, as it arrives: the sha256 of all of it, its size, a tail of
    ``tail_bytes``, and (in a step) the first :data:`OUTPUT_FILE_BYTES` of it in ``sink``."""

    def __init__(self, tail_bytes: int, sink):
        self.digest, self.tail, self.total = hashlib.sha256(), bytearray(), 0
        self.tail_bytes, self.sink, self.lock = tail_bytes, sink, threading.Lock()

    def read(self, proc: subprocess.Popen, on_line) -> list[threading.Thread]:
        """Start the threads that read the command's output (stdout by lines with ``on_line``)."""
        if on_line:
            readers = [threading.Thread(target=self.pump_lines, args=(proc.stdout, on_line), daemon=True),
                       threading.Thread(target=self.pump_chunks, args=(proc.stderr,), daemon=True)]
        else:
            readers = [threading.Thread(target=self.pump_chunks, args=(proc.stdout,), daemon=True)]
        for reader in readers:
            reader.start()
        return readers

    def keep(self, chunk: bytes) -> None:
        """Count ``chunk`` in the digest, the size, the tail and the output file."""
        with self.lock:
            self.digest.update(chunk)
            if self.sink is not None:
                try:
                    if self.total < OUTPUT_FILE_BYTES:
                        self.sink.write(chunk[: OUTPUT_FILE_BYTES - self.total])
                except OSError:  # a full disk costs the file, never the step or its tail
                    self.sink.close()
                    self.sink = None
            self.total += len(chunk)
            self.tail.extend(chunk)
            if len(self.tail) > self.tail_bytes:
                del self.tail[: len(self.tail) - self.tail_bytes]

    def pump_chunks(self, stream) -> None:
        """Keep ``stream``'s bytes until it ends."""
        # A test runner flushes a character a test: woken for each, this thread cost LoopX's
        # process ~30 us a wake-up (45 ms of CPU for a 1,500-test run). After a short read the
        # writer is trickling: let it gather for a moment. The pipe is made to hold 1 MiB, so a
        # command that writes fast meanwhile goes on (and the next, full, read follows at once).
        import fcntl  # Unix only, like the rest of this path

        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        while chunk := stream.read1(1 << 20):
            self.keep(chunk)
            if len(chunk) < 4096:
                time.sleep(0.01)

    def pump_lines(self, stream, on_line) -> None:
        """Keep ``stream``'s bytes and hand each line to ``on_line`` (cut to :data:`LINE_BYTES`)."""
        # Chunks, split here: a line of gigabytes is never held (readline() would hold it whole).
        line = bytearray()
        while chunk := stream.read1(1 << 20):
            self.keep(chunk)
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
                _give(on_line, bytes(line))
                line, start = bytearray(), end + 1
        if line:
            _give(on_line, bytes(line))

    def drain(self, readers: list[threading.Thread], pid: int, timed_out: bool) -> None:
        """Let the readers finish once the command is gone."""
        # Grandchildren may keep the pipe open; after the child is gone give them a moment, then stop.
        for reader in readers:
            reader.join(timeout=5 if not timed_out else 1)
        if any(r.is_alive() for r in readers):
            _signal_group(pid, signal.SIGKILL)
            for reader in readers:
                reader.join(timeout=5)

    def result(self, exit_code: int, timed_out: bool, duration: float, hit: str | None) -> dict:
        """:func:`run_command`'s answer (the output file closed)."""
        with self.lock:
            out_tail, out_total, out_digest = bytes(self.tail), self.total, self.digest.hexdigest()
            if self.sink is not None:
                self.sink.close()
        out = {
            "exit_code": exit_code,
            "timed_out": timed_out,
            "duration_seconds": round(duration, 3),
            "output_tail": out_tail.decode("utf-8", errors="replace"),
            "output_bytes": out_total,
            "output_sha256": "sha256:" + out_digest,
        }
        if hit:
            out["limit_hit"] = hit  # a stable reason (loopx.sandbox.limits.REASONS): the step failed on a limit
        return out


def _give(on_line, line: bytes) -> None:
    try:
        on_line(line.decode("utf-8", errors="replace").rstrip("\r"))
    except Exception:  # a parser's bug must not stop the pump (the child would block on a full pipe)
        pass


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
    return {"exit_code": exit_code, "timed_out": False, "duration_seconds": round(duration, 3),
            "output_tail": output[-tail_bytes:].decode("utf-8", errors="replace"), "output_bytes": len(output),
            "output_sha256": "sha256:" + hashlib.sha256(output).hexdigest()}


def _wait(proc, timeout: float | None) -> int:
    """``proc.wait(timeout)`` that wakes when the child exits, not at the next poll.

    ``Popen.wait`` with a time-out polls, sleeping up to 50 ms between looks, so each command
    ended up to 50 ms late (twice an Issue-Fix step). A pidfd (Linux 5.3) becomes readable the
    moment the child exits; where there is none, ``Popen.wait`` as before.
    """
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

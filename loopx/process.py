"""The one way LoopX runs a child process.

:func:`run_command` runs a command the way ``loopx exec`` and the agent executors need it: with
the executor's environment added, stdin closed, in its own process group, a timeout that kills
that group and every descendant it can find, a bounded tail of the output and the sha256 of
all of it. With ``on_line`` it also hands each line of standard output to the caller as it
arrives (agent CLIs print JSON events); with ``reap`` it kills whatever the child left running
in its group once it exits. It sits below the domain layer (it imports nothing of LoopX), so
``loopx exec`` (``loopx.actions``) and the executor providers share it without an import circle;
``loopx.executors.run_command`` is the same function.
"""

from __future__ import annotations

import os

TAIL_BYTES = 4096


def run_command(argv: list[str], *, env: dict[str, str], timeout: float, cwd: str | None = None,
                on_line=None, reap: bool = False, tail_bytes: int = TAIL_BYTES) -> dict:
    """Run ``argv`` with ``env`` added to this process's environment (a value ``None`` removes a variable).

    Returns ``{"exit_code", "timed_out", "duration_seconds", "output_tail", "output_bytes",
    "output_sha256"}``. Without ``on_line`` stdout and stderr are merged in the order written;
    with it, stdout is read line by line (``on_line(str)`` per line, without the newline) and
    stderr goes only into the tail and digest. A command that cannot start gets exit code 127
    and the reason as its output. On timeout the group gets SIGTERM, then SIGKILL.
    """
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
    full_env = {**os.environ, **env}
    for key in [k for k, v in full_env.items() if v is None]:
        del full_env[key]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if on_line else subprocess.STDOUT,
                                env=full_env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        message = f"cannot start {argv[0]!r}: {exc.strerror or exc}\n".encode()
        return {"exit_code": 127, "timed_out": False, "duration_seconds": 0.0,
                "output_tail": message.decode(), "output_bytes": len(message),
                "output_sha256": "sha256:" + hashlib.sha256(message).hexdigest()}

    def keep(chunk: bytes):
        nonlocal total
        with lock:
            digest.update(chunk)
            total += len(chunk)
            tail.extend(chunk)
            if len(tail) > tail_bytes:
                del tail[: len(tail) - tail_bytes]

    def pump_chunks(stream):
        for chunk in iter(lambda: stream.read1(65536), b""):
            keep(chunk)

    def pump_lines(stream):
        for line in iter(stream.readline, b""):
            keep(line)
            try:
                on_line(line.decode("utf-8", errors="replace").rstrip("\r\n"))
            except Exception:  # a parser's bug must not stop the pump (the child would block on a full pipe)
                pass

    readers = [threading.Thread(target=pump_lines if on_line else pump_chunks, args=(proc.stdout,), daemon=True)]
    if on_line:
        readers.append(threading.Thread(target=pump_chunks, args=(proc.stderr,), daemon=True))
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        proc.wait()
    if reap:
        kill_tree(proc.pid, grace=0)
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
    return {
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "duration_seconds": round(duration, 3),
        "output_tail": out_tail.decode("utf-8", errors="replace"),
        "output_bytes": out_total,
        "output_sha256": "sha256:" + out_digest,
    }


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

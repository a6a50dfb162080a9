"""The one way LoopX runs a child process: :func:`run_command`.

It runs a command the way ``loopx exec`` does: with the executor's environment, a timeout that
kills the whole process group, a bounded tail of the output, and the sha256 of all of it. It
sits below the domain layer (it imports nothing of LoopX), so ``loopx exec`` (``loopx.actions``)
and executor providers share it without an import circle; ``loopx.executors.run_command`` is the
same function.
"""

from __future__ import annotations

import os

TAIL_BYTES = 4096


def run_command(argv: list[str], *, env: dict[str, str], timeout: float, cwd: str | None = None) -> dict:
    """Run ``argv`` with ``env`` added to this process's environment.

    Returns ``{"exit_code", "timed_out", "duration_seconds", "output_tail", "output_bytes",
    "output_sha256"}``; stdout and stderr are merged in the order written. A command that
    cannot start gets exit code 127 and the reason as its output.
    """
    import hashlib
    import signal
    import subprocess
    import threading
    import time

    digest = hashlib.sha256()
    tail = bytearray()
    total = 0
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, **env}, cwd=cwd, start_new_session=True)
    except OSError as exc:
        message = f"cannot start {argv[0]!r}: {exc.strerror or exc}\n".encode()
        return {"exit_code": 127, "timed_out": False, "duration_seconds": 0.0,
                "output_tail": message.decode(), "output_bytes": len(message),
                "output_sha256": "sha256:" + hashlib.sha256(message).hexdigest()}

    def pump():
        nonlocal total
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            digest.update(chunk)
            total += len(chunk)
            tail.extend(chunk)
            if len(tail) > TAIL_BYTES:
                del tail[: len(tail) - TAIL_BYTES]

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            proc.wait()
    # Grandchildren may keep the pipe open; after the child is gone give them a moment, then stop.
    reader.join(timeout=5 if not timed_out else 1)
    if reader.is_alive():
        _kill_group(proc, signal.SIGKILL)
        reader.join(timeout=5)
    duration = time.monotonic() - started
    return {
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "duration_seconds": round(duration, 3),
        "output_tail": bytes(tail).decode("utf-8", errors="replace"),
        "output_bytes": total,
        "output_sha256": "sha256:" + digest.hexdigest(),
    }


def _kill_group(proc, sig) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

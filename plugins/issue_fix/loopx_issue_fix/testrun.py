"""Running the issue's test command in the repository, and what one run of it shows.

The command is a shell command line (``pytest -q tests/test_x.py``, ``make test``) run with
``sh -c`` in the repository root. What is kept as evidence: exit status, duration, a bounded
tail of the combined output and the sha256 of all of it (the tail is what a reviewer reads;
the hash proves which output the tail came from).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time

DEFAULT_TIMEOUT_SECONDS = 1800
TAIL_BYTES = 4000


def run_test(repo: str, command: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> dict:
    """Run ``command`` in ``repo``; returns ``{"command", "exit_code", "passed", "timed_out",
    "duration_seconds", "output_tail", "output_sha256", "output_bytes"}``.

    A command that cannot start, or that outlives ``timeout`` (its process group is killed),
    counts as failing: exit code 127 or ``None`` with ``timed_out``.
    """
    env = dict(os.environ)
    # The test command is the project's, not LoopX's: it must not inherit a run's identity.
    for key in ("LOOPX_ACTOR", "LOOPX_RUN_ID", "LOOPX_GOAL_ID"):
        env.pop(key, None)
    started = time.monotonic()
    timed_out = False
    try:
        proc = subprocess.Popen(
            ["sh", "-c", command], cwd=repo, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
    except OSError as exc:
        output, code = f"cannot start the test command: {exc}".encode(), 127
    else:
        try:
            output, _ = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            import signal

            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            output, _ = proc.communicate()
            code = None
    tail = output[-TAIL_BYTES:].decode("utf-8", errors="replace")
    return {
        "command": command,
        "exit_code": code,
        "passed": code == 0,
        "timed_out": timed_out,
        "duration_seconds": round(time.monotonic() - started, 3),
        "output_tail": tail,
        "output_sha256": hashlib.sha256(output).hexdigest(),
        "output_bytes": len(output),
    }

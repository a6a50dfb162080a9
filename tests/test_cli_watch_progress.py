"""`loopx status --watch` as a real process (redraws on change, quits cleanly on SIGINT) and
progress bars on stderr only when it is a terminal (a pseudo-terminal here)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal


def _read_until(proc, stream, needle: str, timeout: float = 60) -> str:
    """Read ``stream`` (a pipe) until ``needle`` has appeared; return everything read."""
    seen = ""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, f"never saw {needle!r}; got:\n{seen}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 65536).decode()
    return seen


def test_status_watch_redraws_on_change_attention_first_and_quits_on_ctrl_c(registry_url, loopx_proc):
    env = loopx_env(registry_url)
    calm = make_goal(in_process(loopx_proc.url), title="calm goal")["goal"]
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "status", "--watch", "--interval", "0.1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = _read_until(proc, proc.stdout, "calm goal")
        assert "loopx status --watch" in first and "Ctrl-C quits" in first
        urgent = make_goal(in_process(loopx_proc.url), title="urgent goal")["goal"]
        assert loopx_proc("gate", "add", urgent, "--title", "approve the spend").code == 0
        frames = _read_until(proc, proc.stdout, "attention: gate_pending")
        last = frames.split("loopx status --watch")[-1]
        # the goal that needs a human is listed before the calm one
        assert last.index(urgent) < last.index(calm), last
        assert last.splitlines()[[i for i, ln in enumerate(last.splitlines()) if urgent in ln][0]].startswith("!")
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
    err = proc.stderr.read().decode()
    assert code == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_status_watch_refuses_bad_input_at_once(loopx_proc):
    r = loopx_proc("status", "--watch", "--goal-id", "g-000000000000")
    assert r.code == 2 and r.err.strip().endswith("[goal_not_found]"), r


def _on_a_terminal(argv, env, timeout=120):
    """Run ``argv`` with stderr on a pseudo-terminal; return (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other side closed
                break
            if not chunk:
                break
            got += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode()
    code = proc.wait(timeout=timeout)
    os.close(master)
    return code, out, got.decode(errors="replace")


def _fill(loopx_proc, n):
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(loopx_proc.url) as reg:
        for i in range(n):
            project_prompt.create(reg, "user", title=f"goal {i}")


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
@pytest.mark.slow
def test_progress_bars_on_a_terminal_only(registry_url, loopx_proc, tmp_path):
    _fill(loopx_proc, 40)
    env = loopx_env(registry_url, LOOPX_PLUGINS="self_repair")  # the capability under test, nothing else
    # registry copy: a bar for the events and one for the verification, on the terminal
    code, out, term = _on_a_terminal([sys.executable, "-m", "loopx", "registry", "copy", "--from", registry_url,
                                      "--to", str(tmp_path / "copy.db")], env)
    assert code == 0 and "copied 40 goals" in out
    assert "\r" in term and "copying events" in term and "100% 40/40" in term and "verifying goals" in term
    # the same, piped: not a byte of progress
    p = subprocess.run([sys.executable, "-m", "loopx", "registry", "copy", "--from", registry_url,
                        "--to", str(tmp_path / "copy2.db")], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""

    # self-repair check and fix over the whole registry
    code, out, term = _on_a_terminal([sys.executable, "-m", "loopx", "self-repair", "check"], env)
    assert code == 0 and "checking goals" in term and "40/40" in term, (out, term)
    code, out, term = _on_a_terminal([sys.executable, "-m", "loopx", "self-repair", "fix"], env)
    assert code == 0 and "repairing goals" in term and "40/40" in term, (out, term)
    p = subprocess.run([sys.executable, "-m", "loopx", "self-repair", "check"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "checking goals" not in p.stderr

    # a benchmark's fill
    code, out, term = _on_a_terminal([sys.executable, str(ROOT / "bench" / "bench_core.py"), "--goals", "25",
                                      "--runs", "1"], {**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert code == 0 and "filling 25 goals" in term and "25/25" in term, (out, term)

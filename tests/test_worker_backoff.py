"""The worker's back-off, as documented: failed turns of one goal are spaced by `--retry-seconds`,
doubling with each failure in a row up to an hour, and `loopx status` shows the next attempt.
A real worker process on the test's movable wall clock (no sleeping: the clock is moved on)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from loopx.values import clock
from loopx.domain.supervision import RETRY_CAP_SECONDS
from loopx.testing import wait_until
from tests.conftest import loopx_env
from tests.factories import make_goal


def _cli(url, *args):
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)], env=loopx_env(url),
                       capture_output=True, text=True, timeout=60)
    return json.loads(p.stdout) if p.stdout.strip() else None


def _finished(url, gid):
    return [r for r in _cli(url, "run", "list", gid) if r["status"] == "finished"]


def _beats(url):
    return [w["last_beat_at"] for w in _cli(url, "status")["workers"]]


@pytest.mark.slow
def test_failed_turns_are_spaced_by_retry_seconds_doubling_to_a_cap_and_status_shows_the_next_attempt(
        sqlite_url, tmp_path, loopx_clock):
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    gid = make_goal(url, title="always failing", description="d", acts={"work": ["sh", "-c", "exit 4"]},
                    todo_texts=["try"], limits={"stuck_after": 50})["goal"]
    w = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--retry-seconds", "1000", "--beat-seconds", "0.3"],
                         env=loopx_env(url), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        expected_waits = [1000, 2000, 3600]  # doubling, then the cap
        assert RETRY_CAP_SECONDS == 3600
        for n, wait in enumerate(expected_waits, 1):
            runs = wait_until(lambda: len(_finished(url, gid)) == n and _finished(url, gid), f"failed turn {n}")
            assert runs[0]["outcome"] == "failed"
            # The worker beats on and sees the turn's own ledger events, but does not try again.
            seen = _beats(url)
            wait_until(lambda: _beats(url) != seen, "two more heartbeats")
            seen = _beats(url)
            wait_until(lambda: _beats(url) != seen, "another heartbeat")
            assert len(_cli(url, "run", "list", gid)) == n, "tried again before its back-off ended"
            # status shows when it tries next.
            goal = next(g for g in _cli(url, "status")["goals"] if g["id"] == gid)
            assert goal["needs_you"] is None
            assert goal["retry"] == {"at": clock.add_seconds(runs[0]["finished_at"], wait), "failed_turns": n,
                                     "retry_seconds": 1000}
            text = subprocess.run([sys.executable, "-m", "loopx", "status"], env=loopx_env(url), capture_output=True,
                                  text=True, timeout=60).stdout
            assert f"next attempt at {goal['retry']['at']} (back-off: {n} failed turn(s) in a row" in text
            # Just short of the back-off: still nothing; past it, the next turn.
            loopx_clock.set(clock.seconds_between(clock.now(), goal["retry"]["at"]) + loopx_clock.offset - 35)
            seen = _beats(url)
            wait_until(lambda: _beats(url) != seen, "a heartbeat on the moved clock")
            seen = _beats(url)
            wait_until(lambda: _beats(url) != seen, "another heartbeat")
            assert len(_cli(url, "run", "list", gid)) == n
            loopx_clock.advance(40)
    finally:
        os.kill(w.pid, signal.SIGTERM)
        w.communicate(timeout=60)

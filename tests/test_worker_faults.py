"""A worker outlives registry faults: a real ``loopx worker`` process on a registry in a small
tmpfs that is filled, then freed, while it runs. It backs off, says so in its log (``fault``
lines, then ``fault_cleared``), never exits, and takes turns again once there is room."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from loopx.testing import wait_until
from tests.conftest import loopx_env
from tests.factories import make_goal, workspace_of


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of its own (root only), unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(path):
    """Write ``path`` until the file system refuses: the disk is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _events(log_path):
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


def _registry_faults(log_path):
    """The fault / fault_cleared lines about the registry (a notification's own faults aside)."""
    return [e for e in _events(log_path) if e["event"] in ("fault", "fault_cleared") and e["what"] == "registry"]


def test_a_full_disk_never_ends_the_worker_it_backs_off_and_carries_on(small_disk, tmp_path):
    url = str(small_disk / "registry.db")
    work = tmp_path / "work"
    work.mkdir()
    first = make_goal(url, title="before", description="d", acts={"work": ["sh", "-c", "echo a >> before"]},
                      todo_texts=["t"])["goal"]
    log = tmp_path / "worker.log"
    with open(log, "w") as err:
        w = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--beat-seconds", "0.2", "--log-format", "json"],
                             env=loopx_env(url), cwd=work, stdout=subprocess.DEVNULL, stderr=err, text=True,
                             start_new_session=True)
    try:
        wait_until(lambda: any(e["event"] == "turn_end" and e["goal"] == first for e in _events(log)), "a first turn")
        _fill(small_disk / "filler")
        faults = wait_until(lambda: _registry_faults(log), "a fault line")
        assert faults[0]["event"] == "fault" and faults[0]["error"] == "disk_full", faults
        wait_until(lambda: len([e for e in _registry_faults(log) if e["event"] == "fault"]) >= 3 or w.poll() is not None,
                   "it to try again, and again")
        assert w.poll() is None, "the worker ended on a full disk"
        (small_disk / "filler").unlink()
        # (On a full disk some writes still fit in space SQLite already holds: faults come and go.)
        wait_until(lambda: _registry_faults(log)[-1]["event"] == "fault_cleared", "the fault to clear")
        # It carries on: a goal made now gets its turn from the same process.
        after = make_goal(url, title="after", description="d", acts={"work": ["sh", "-c", "echo b >> after"]},
                          todo_texts=["t"])["goal"]
        wait_until(lambda: any(e["event"] == "turn_end" and e["goal"] == after and e["outcome"] == "ok"
                               for e in _events(log)), "a turn after the fault cleared")
        assert w.poll() is None
    finally:
        os.kill(w.pid, signal.SIGTERM)
        w.wait(timeout=60)
    assert w.returncode == 128 + signal.SIGTERM, log.read_text()[-2000:]  # stopped by the signal, not a fault
    assert _events(log)[-1]["event"] == "worker_stop"



def test_a_lease_whose_owner_was_killed_never_blocks_its_goal_even_stamped_a_year_ahead(tmp_path, loopx_clock):
    url = str(tmp_path / "registry.db")
    work = tmp_path / "work"
    work.mkdir()
    go = work / "go"
    gid = make_goal(url, title="g", description="d", todo_texts=["t"], acts={
        "work": ["sh", "-c", f"touch started; while [ ! -e {go} ]; do sleep 0.05; done"]})["goal"]
    loopx_clock.advance(365 * 86400)  # the wall clock a year ahead: the lease expires a year from now
    a = subprocess.Popen([sys.executable, "-m", "loopx", "worker", "--beat-seconds", "1"], env=loopx_env(url), cwd=work,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: (workspace_of(url, gid) / "started").exists(), "the step to start")
    os.kill(a.pid, signal.SIGKILL)
    a.wait(timeout=10)
    go.touch()  # its orphaned turn ends (its lease stays: the worker never released it)
    loopx_clock.set(0)  # the clock set right again
    log = tmp_path / "b.log"
    with open(log, "w") as err:
        b = subprocess.run([sys.executable, "-m", "loopx", "worker", "--exit-when-idle", "--log-format", "json"],
                           env=loopx_env(url), cwd=work, stdout=subprocess.DEVNULL, stderr=err, timeout=120)
    events = [(e["event"], e.get("goal")) for e in _events(log)]
    assert ("lease_taken", gid) in events and ("lease_refused", gid) not in events, events
    assert b.returncode == 0

"""The one way LoopX runs a child: a timeout stops the whole tree, even what left the group."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from loopx.ledger.registry import Registry
from tests.conftest import loopx_env
from tests.test_agents_cli import _processes_of
from tests.test_turn_helpers import ask, make_goal

PY = sys.executable
# Starts a grandchild in a session (and process group) of its own, then hangs.
ESCAPER = ("import subprocess, time; subprocess.Popen(['setsid', 'sleep', '300']); "
           "print('started', flush=True); time.sleep(300)")


def test_an_exec_timeout_stops_descendants_that_left_the_process_group(sqlite_url):
    reg = Registry.open(sqlite_url)
    try:
        g = make_goal(reg, acts={"hang": [PY, "-c", ESCAPER]})["goal"]
        run_id = ask(reg, g)["interaction_contract"]["run_id"]
    finally:
        reg.close()
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "exec", "--run-id", run_id, "--action", "hang",
                        "--timeout", "1.5"], env=loopx_env(sqlite_url, LOOPX_ACTOR="executor"),
                       capture_output=True, text=True, timeout=60)
    data = json.loads(p.stdout)["data"]
    assert data["timed_out"] is True and data["output_tail"] == "started\n"
    assert _processes_of(run_id) == []


# Starts a daemon the classic way - a subshell that exits, leaving `setsid sleep` orphaned in a
# session of its own - then hangs. No parent link leads from the command to the daemon any more.
DAEMON = "(setsid sleep 300 &); echo started; sleep 300"


def test_an_exec_timeout_stops_a_daemon_that_left_the_session_and_lost_its_parent(sqlite_url):
    reg = Registry.open(sqlite_url)
    try:
        g = make_goal(reg, acts={"hang": ["sh", "-c", DAEMON]})["goal"]
        run_id = ask(reg, g)["interaction_contract"]["run_id"]
    finally:
        reg.close()
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "exec", "--run-id", run_id, "--action", "hang",
                        "--timeout", "1.5"], env=loopx_env(sqlite_url, LOOPX_ACTOR="executor"),
                       capture_output=True, text=True, timeout=60)
    data = json.loads(p.stdout)["data"]
    assert data["timed_out"] is True and data["output_tail"] == "started\n"
    assert data["duration_seconds"] < 6
    assert _processes_of(run_id) == []


def test_reap_ends_a_daemon_the_command_left_behind_and_keeps_the_exit_status():
    from loopx.sandbox.process import run_command

    marker = "LOOPX_TEST_DAEMON=" + os.urandom(6).hex()
    res = run_command(["sh", "-c", "(setsid sleep 300 &); echo left one; exit 3"],
                      env={"LOOPX_TEST_DAEMON": marker.split("=")[1]}, timeout=30, reap=True)
    assert res["exit_code"] == 3 and res["output_tail"] == "left one\n" and not res["timed_out"]
    assert res["duration_seconds"] < 5
    assert _with_env(marker) == []
    res = run_command(["sh", "-c", "kill -KILL $$"], env={}, timeout=30)
    assert res["exit_code"] == -9
    res = run_command(["no-such-program-here"], env={}, timeout=30)
    assert res["exit_code"] == 127 and "cannot start 'no-such-program-here'" in res["output_tail"]


def _with_env(entry: str) -> list[int]:
    """Live processes with ``entry`` (``NAME=VALUE``) in their environment."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if entry.encode() in f.read().split(b"\0"):
                        with open(f"/proc/{name}/stat", "rb") as s:
                            if s.read().split(b") ")[-1][:1] != b"Z":
                                found.append(int(name))
            except OSError:
                continue
    return found

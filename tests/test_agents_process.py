"""The one way LoopX runs a child: a timeout stops the whole tree, even what left the group."""

from __future__ import annotations

import json
import subprocess
import sys

from loopx.registry import Registry
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

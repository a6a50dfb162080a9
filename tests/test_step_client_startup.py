"""The ``loopx`` a confined step runs only forwards its argv to the turn's broker: it loads no
plugin machinery (issue 23: an Issue-Fix step inside a turn starts two of them, ``loopx exec``
and the ``loopx issue-fix ...`` it runs)."""

from __future__ import annotations

import os
import sys

from tests.conftest import loopx_env
from tests.factories import make_goal

PY = sys.executable


def test_a_steps_loopx_reaches_the_broker_without_importing_pluggy(loopx_proc, registry_url, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "loopx").write_text(f"#!/bin/sh\nexec {PY} -X importtime -m loopx \"$@\"\n")
    (bin_dir / "loopx").chmod(0o755)
    path = {"PATH": str(bin_dir) + os.pathsep + loopx_env(registry_url)["PATH"]}
    probe = ("out=$(loopx todo list --goal-id \"$LOOPX_GOAL_ID\" --json 2>&1); "
             "echo \"$out\" | grep -q '\"text\": \"work\"' && echo ANSWERED; "
             "echo \"$out\" | grep -q ' loopx.broker_client$' && echo FORWARDED; "
             "echo \"$out\" | grep -q ' pluggy$' && echo PLUGGY; true")
    made = make_goal(loopx_proc, title="Client", acts={"probe": ["sh", "-c", probe]}, todo_texts=("work",))
    g = made["goal"]
    doc = loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json", env={"LOOPX_ACTOR": "executor"})
    run = doc.json["interaction_contract"]["run_id"]
    r = loopx_proc("exec", "--run-id", run, "--agent", "a1", "--action", "probe", "--json",
                   env={"LOOPX_ACTOR": "executor", **path})
    assert r.code == 0, r
    tail = r.json["data"]["output_tail"]
    assert "ANSWERED" in tail and "FORWARDED" in tail, tail
    assert "PLUGGY" not in tail, tail

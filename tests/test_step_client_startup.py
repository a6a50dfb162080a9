"""The ``loopx`` a confined step runs only forwards its argv to the turn's broker: it loads no
plugin machinery and no command line (issue 23: every ``loopx`` an agent runs in its turn is one
of these clients), whether it is started as ``python -m loopx`` or as the installed console
script an agent finds on its ``PATH``."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.conftest import loopx_env
from tests.cli_helpers import in_process
from tests.factories import make_goal

PY = sys.executable


@pytest.mark.parametrize("started_as", ["module", "console script", "step's client"])
def test_a_steps_loopx_reaches_the_broker_without_importing_pluggy_or_click(loopx_proc, registry_url,
                                                                            started_as):
    # The instrumented start is written into the probe itself: the step runs in a world of its own
    # whose /tmp is private, so a wrapper under this test's tmp_path would not be there; the
    # interpreter and the console script (the venv) are, read-only.
    if started_as == "module":
        start = f"{PY} -X importtime -m loopx"
    elif started_as == "step's client":
        # The `loopx` first on a step's PATH: LoopX's own file in the step's directory (read-only
        # to the step), started without site-packages.
        start = f'{PY} -X importtime -I -S "$(command -v loopx)"'
    else:
        script = shutil.which("loopx", path=loopx_env(registry_url)["PATH"])
        assert script, "the loopx console script is installed beside the interpreter"
        start = f"{PY} -X importtime {script}"
    path = {"PATH": loopx_env(registry_url)["PATH"]}
    # The step's own client is first on the PATH; the probe starts this test's instrumented `loopx`.
    probe = ("case $(command -v loopx) in */loopx-step-*/bin/loopx) echo STEP_CLIENT;; esac; "
             f"out=$({start} todo list --goal-id \"$LOOPX_GOAL_ID\" --json 2>&1); "
             "echo \"$out\" | grep -q '\"text\": \"work\"' && echo ANSWERED; "
             "echo \"$out\" | grep -q ' loopx.sandbox.broker_client$' && echo FORWARDED; "
             "echo \"$out\" | grep -q ' pluggy$' && echo PLUGGY; "
             "echo \"$out\" | grep -q ' click$' && echo CLICK; true")
    made = make_goal(in_process(loopx_proc.url), title="Client", acts={"probe": ["sh", "-c", probe]}, todo_texts=("work",))
    g = made["goal"]
    doc = loopx_proc("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json", env={"LOOPX_ACTOR": "executor"})
    run = doc.json["interaction_contract"]["run_id"]
    r = loopx_proc("exec", "--run-id", run, "--agent", "a1", "--action", "probe", "--json",
                   env={"LOOPX_ACTOR": "executor", **path})
    assert r.code == 0, r
    tail = r.json["data"]["output_tail"]
    assert "ANSWERED" in tail and "FORWARDED" in tail and "STEP_CLIENT" in tail, tail
    assert "PLUGGY" not in tail and "CLICK" not in tail, tail

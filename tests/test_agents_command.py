"""The ``command`` executor runs any program from an argv template and charges its usage line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from loopx.domain import runs, todos
from loopx.ledger.registry import Registry
from tests.test_turn_helpers import make_goal

PY = sys.executable

# A tiny agent: runs the prompt's ```sh block line by line, then prints its usage line.
AGENT = r'''
import os, re, subprocess, sys
prompt = open(os.environ["LOOPX_PROMPT_FILE"]).read()
assert prompt == sys.argv[1]
block = re.search(r"```sh\n(.*?)\n```", prompt, re.S).group(1)
for line in block.splitlines():
    subprocess.run(line, shell=True, check=False)
print('{"loopx_usage": {"tokens": 4321, "cost": 0.25}}')
print('{"loopx_handoff": "ran the block"}')
sys.exit(int(sys.argv[2]))
'''


def _turn(tmp_path, url, goal_id, template, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update({"LOOPX_REGISTRY": url, "LOOPX_EXECUTOR_COMMAND": template, **extra})
    return subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", goal_id, "--executor",
                           "command"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_the_command_executor_charges_the_usage_line_and_fails_on_a_non_zero_exit(tmp_path, sqlite_url):
    (tmp_path / "agent.py").write_text(AGENT)
    reg = Registry.open(sqlite_url)
    try:
        made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
        p = _turn(tmp_path, sqlite_url, made["goal"], json.dumps([PY, "agent.py", "{prompt}", "0"]))
        assert p.returncode == 0, p.stderr
        t = json.loads(p.stdout)
        with reg.read() as tx:
            run = runs.load_run(tx, t["run_id"])
            assert todos.load_todo(tx, made["goal"], made["todos"][0]).status == "done"
        assert (t["outcome"], run.tokens, run.cost) == ("ok", 4321, 0.25)
        assert "ran the block" in run.handoff

        made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
        t = json.loads(_turn(tmp_path, sqlite_url, made["goal"], f"{PY} agent.py {{prompt}} 5").stdout)
        assert t["outcome"] == "failed" and "exited 5" in t["handoff"]
    finally:
        reg.close()


def test_a_missing_or_malformed_template_is_one_clear_error_and_opens_no_run(tmp_path, sqlite_url):
    reg = Registry.open(sqlite_url)
    try:
        made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
        for template in ("", "[1, 2]", '["x", "{nope}"]', "[not json"):
            p = _turn(tmp_path, sqlite_url, made["goal"], template)
            assert p.returncode == 2 and json.loads(p.stdout)["error"]["code"] == "invalid_argument", p
        with reg.read() as tx:
            assert tx.one("SELECT COUNT(*) AS n FROM runs")["n"] == 0
    finally:
        reg.close()


def test_a_missing_agent_cli_is_executor_unavailable_and_opens_no_run(tmp_path, sqlite_url):
    reg = Registry.open(sqlite_url)
    try:
        made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
        for executor, var in (("claude-code", "LOOPX_CLAUDE_BIN"), ("codex", "LOOPX_CODEX_BIN")):
            env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
            env.update({"LOOPX_REGISTRY": sqlite_url, var: str(tmp_path / "no-such-cli")})
            p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"],
                                "--executor", executor], env=env, capture_output=True, text=True, timeout=60)
            err = json.loads(p.stdout)["error"]
            assert p.returncode == 2 and err["code"] == "executor_unavailable" and var in err["message"]
        with reg.read() as tx:
            assert tx.one("SELECT COUNT(*) AS n FROM runs")["n"] == 0
    finally:
        reg.close()

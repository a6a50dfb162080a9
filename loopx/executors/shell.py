"""The built-in ``shell`` executor: carries out one turn by running the contract's own commands.

It claims the contract's todo, runs each allowed action through ``loopx exec`` (so every
command is checked against the contract and recorded as evidence), marks the todo done when
every action succeeded, and leaves a hand-off note. It runs nothing the contract does not list,
and it cannot plan: under a planning contract (a goal without todos) it runs the allowed actions
and hands off to whoever can write the plan. Every command runs as a child process with
``LOOPX_ACTOR=executor``, exactly as pasted from the contract.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

NAME = "shell"


class ShellExecutor:
    """Runs the claim, exec and done steps a contract lists, in order."""

    def __init__(self, timeout: float = 600.0):
        self.timeout = timeout

    def run_turn(self, registry, contract: dict, *, agent: str) -> dict:
        """Carry out the turn ``contract`` (a should-run answer) allows; returns what ``run finish`` needs."""
        doc = contract["interaction_contract"]
        run_id = doc["run_id"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
        env.update({"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": run_id, "LOOPX_AGENT": agent,
                    "LOOPX_GOAL_ID": contract["goal_id"], "LOOPX_REGISTRY": registry.store.url})
        ran, failed, refused, todo_done, claimed = [], [], [], None, None
        for line in doc["cli_channel"]["next_cli_actions"]:
            argv = shlex.split(line)
            step = argv[1:3]
            if step == ["todo", "claim"]:
                code, out = self._loopx(argv, env)
                if code != 0:
                    refused.append(f"claim refused: {_error(out)}")
                    break
                claimed = _option(argv, "--todo-id")
            elif argv[1] == "exec":
                code, out = self._loopx(argv, env)
                name = _option(argv, "--action") or line
                if code == 2:
                    refused.append(f"{name}: {_error(out)}")
                    break
                (ran if code == 0 else failed).append(name)
            elif step == ["todo", "done"]:
                if failed or refused:
                    continue
                code, out = self._loopx(argv, env)
                if code != 0:
                    refused.append(f"done refused: {_error(out)}")
                else:
                    todo_done = _option(argv, "--todo-id")
        return _report(ran, failed, refused, claimed, todo_done, planning=contract["reasons"][0] == "no_todos")

    def _loopx(self, argv: list[str], env: dict) -> tuple[int, str]:
        cmd = [sys.executable, "-m", "loopx", "--format", "json", *argv[1:]]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.timeout + 60)
        except subprocess.TimeoutExpired:
            return 2, json.dumps({"error": {"code": "timeout", "message": f"{shlex.join(argv)} did not return"}})
        return p.returncode, p.stdout or p.stderr


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def _error(out: str) -> str:
    try:
        err = json.loads(out)["error"]
        return f"{err['message']} [{err['code']}]"
    except (ValueError, KeyError, TypeError):
        return out.strip()[-300:] or "no output"


def _report(ran, failed, refused, claimed, todo_done, *, planning: bool) -> dict:
    parts = []
    if ran:
        parts.append("ok: " + ", ".join(ran))
    if failed:
        parts.append("failed: " + ", ".join(failed))
    if refused:
        parts.append("stopped: " + "; ".join(refused))
    if todo_done:
        parts.append(f"todo {todo_done} done")
    elif claimed:
        parts.append(f"todo {claimed} still open")
    if planning:
        parts.append("the goal has no todos: a planner (human or agent) should add them with `loopx todo add`")
    if failed:
        outcome = "failed"
    elif refused or planning or (claimed and not todo_done):
        outcome = "partial"
    else:
        outcome = "ok"
    return {"outcome": outcome, "tokens": 0, "cost": 0.0,
            "handoff": "shell executor: " + ("; ".join(parts) if parts else "nothing to run")}

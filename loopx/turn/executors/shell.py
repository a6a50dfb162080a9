"""The built-in ``shell`` executor: carries out one turn by running the contract's steps.

It runs every step of ``cli_channel.steps`` in order - the claim, each ``do`` step (allowed
actions and capability steps alike, each a ``loopx exec`` that records its own evidence), the
record steps - and stops at the first step that fails. The ``finish`` step is left to the core
(:func:`loopx.turn.governed.turn` finishes the run), which records the outcome the run's evidence
supports. The steps are the only description of the turn it reads: it never parses command
lines. Inside a turn every step goes through the turn's broker (:mod:`loopx.turn.broker`), as this
run's executor; the actions a step runs are confined children. It cannot plan: under a planning contract (a goal without todos) it runs what the
contract lists and hands off to whoever can write the plan.
"""

from __future__ import annotations

import json
import os
import subprocess

NAME = "shell"


class ShellExecutor:
    """Runs a contract's steps, in order, up to the first failure."""

    def __init__(self, timeout: float = 600.0):
        self.timeout = timeout

    def run_turn(self, registry, contract: dict, *, agent: str) -> dict:
        """Carry out the turn ``contract`` (a should-run answer) allows; returns what ``run finish`` needs."""
        from loopx.domain import runs
        from loopx.values import steps

        doc = contract["interaction_contract"]
        run_id = doc["run_id"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
        env.update({"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": run_id, "LOOPX_AGENT": agent,
                    "LOOPX_GOAL_ID": contract["goal_id"], "LOOPX_REGISTRY": registry.store.url})
        from loopx.sandbox import interrupt

        done, stopped = [], None
        for s in steps.of(doc):
            if s["kind"] == "finish":
                continue
            if interrupt.requested():  # SIGTERM / Ctrl-C: start no new step
                stopped = f"{s['id']}: not started (interrupted)"
                break
            code, out = self._loopx(s["argv"], env)
            if code != 0:
                stopped = f"{s['id']}: {_error(out, code)}"
                break
            done.append(s["id"])
        with registry.read() as tx:
            res = runs.run_results(tx, runs.load_run(tx, run_id))
        outcome = steps.derive(res)
        planning = contract["reasons"][0] == "no_todos"
        if outcome == "ok" and (stopped or planning):
            outcome = "partial"  # nothing failed, but the turn did not get through its work
        parts = []
        if done:
            parts.append("ran " + ", ".join(done))
        if stopped:
            parts.append("stopped at " + stopped)
        why = steps.handoff_for(res, [])
        if why:
            parts.append(why)
        if planning:
            parts.append("the goal has no todos: a planner (human or agent) should add them with `loopx todo add`")
        # What this turn did not run because a gate holds it back, so the hand-off says so.
        held = [f"action {g['blocks'][7:]} (gate {g['id']} {g['status']})"
                for g in (doc.get("gates") or {}).get("pending", [])
                if str(g.get("blocks", "")).startswith("action:") and g.get("status") in ("pending", "rejected")]
        if held:
            parts.append("held back: " + ", ".join(held))
        return {"outcome": outcome, "tokens": 0, "cost": 0.0,
                "handoff": "shell executor: " + ("; ".join(parts) if parts else "nothing to run")}

    def _loopx(self, argv: list[str], env: dict) -> tuple[int, str]:
        from loopx.sandbox.process import STEP

        step = STEP.get()
        if step is not None and step.broker is not None:
            # Inside a turn: each step goes through the turn's broker, as this run's executor
            # (the actions it runs are confined children).
            out = step.broker.dispatch(["--format", "json", *argv[1:]], cwd=os.getcwd())
            return out["exit_code"], out["stdout"] or out["stderr"]
        # The LoopX that runs this executor runs the steps, whatever PATH says, started as LoopX
        # starts itself (loopx.sandbox.selfrun: isolated, in LoopX's own directory).
        from loopx.sandbox import selfrun

        spawn = selfrun.command(["--format", "json", *argv[1:]],
                                {**{k: None for k in os.environ if k.startswith("LOOPX_")}, **env})
        # Its steps' actions run where this turn runs (nothing is imported from there: -I).
        spawn["cwd"] = os.getcwd()
        try:
            # A session of its own: a Ctrl-C in the terminal reaches LoopX, which lets the step
            # finish within its grace period (loopx.sandbox.interrupt), not the step.
            p = subprocess.run(spawn["args"], env=spawn["env"], cwd=spawn["cwd"], capture_output=True, text=True,
                               timeout=self.timeout + 60, start_new_session=True)
        except subprocess.TimeoutExpired:
            return 2, json.dumps({"error": {"code": "timeout", "message": f"{argv[1]} did not return"}})
        return p.returncode, p.stdout or p.stderr


def _error(out: str, code: int) -> str:
    try:
        doc = json.loads(out)
    except ValueError:
        return out.strip()[-300:] or f"exit {code}"
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        return f"{err.get('message')} [{err.get('code')}]"
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict) and "exit_code" in doc["data"]:
        return doc.get("summary") or f"exit {doc['data']['exit_code']}"
    return f"exit {code}"

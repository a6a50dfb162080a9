"""The worker's turns (:mod:`loopx.worker`): each a ``loopx turn`` child process, started as LoopX
starts itself (:mod:`loopx.sandbox.selfrun`), read by a thread of its own until it ends."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

from loopx.values import clock


class Child:
    """One running turn: its goal, lease token, process and executor, and what it printed."""

    __slots__ = ("goal_id", "token", "proc", "out", "err", "started", "done", "executor", "started_at")

    def __init__(self, goal_id, token, proc, executor):
        self.goal_id, self.token, self.proc, self.executor = goal_id, token, proc, executor
        self.out, self.err, self.started, self.done, self.started_at = "", "", time.monotonic(), False, clock.now()


def start_turn(goal_id: str, token: int, executor: str, *, worker_id: str, agent: str, url: str, workdir: str,
               grace_seconds: float, log, wake: threading.Event) -> Child:
    """Start the turn of ``goal_id`` under the lease ``token`` the worker won; ``wake`` is set when
    it ends (its output then in :attr:`Child.out`, its activity lines in ``log``)."""
    from loopx.sandbox import selfrun

    # LoopX started as LoopX starts itself (loopx.sandbox.selfrun): isolated, in LoopX's own directory,
    # never importing anything from the agents' workdir a turn left a `loopx/` package in.
    # On a terminal, the turn's agent activity (one line per event) comes back on its stderr and is
    # logged as `activity` lines; in a pipe or the journal the turns stay quiet.
    shown = log.activity
    spawn = selfrun.command(["--format", "json", "turn", goal_id, "--executor", executor, "--agent", agent,
                             "--grace-seconds", str(grace_seconds), "--worker-lease", f"{worker_id}:{token}",
                             "--workdir", workdir],
                            {"LOOPX_RUN_ID": None, "LOOPX_ACTOR": None, "LOOPX_STEP_ID": None,
                             "LOOPX_REGISTRY": url, "LOOPX_WORKER_PID": str(os.getpid()),
                             "LOOPX_ACTIVITY": "1" if shown else "0"})
    # A session of its own: a Ctrl-C in the worker's terminal reaches the worker, which passes
    # SIGTERM on to its turns (each then lets its step finish within the grace period).
    proc = subprocess.Popen(spawn["args"], env=spawn["env"], cwd=spawn["cwd"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if shown else subprocess.STDOUT, text=True,
                            start_new_session=True)
    child = Child(goal_id, token, proc, executor)

    def relay(lines: list) -> None:
        for line in proc.stderr:
            lines.append(line)
            log("activity", goal=goal_id, line=line.rstrip("\n")[-300:])

    def wait():
        if shown:
            err: list = []
            reader = threading.Thread(target=relay, args=(err,), daemon=True)
            reader.start()
            out = proc.stdout.read() or ""
            reader.join()
            proc.wait()
            child.out, child.err = out, "".join(err)
        else:
            child.out = proc.communicate()[0] or ""
        child.done = True
        wake.set()

    threading.Thread(target=wait, daemon=True).start()
    return child


def answer(child: Child) -> dict:
    """The turn's JSON answer (``{}`` when it printed none)."""
    try:
        return json.loads(child.out[child.out.find("{"):]) if "{" in child.out else {}
    except ValueError:
        return {}

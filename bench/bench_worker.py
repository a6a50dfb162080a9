"""``loopx worker`` at scale: 10,000 goals, 100 due, ``--concurrency 8``, a no-op executor.

Run: ``python bench/bench_worker.py [--goals 10000] [--due 100] [--concurrency 8] [--idle-seconds 20]``

The registry is filled through the ledger (as ``bench/fill.py`` does): every goal has a one-day
cadence and all but the due ones had a turn a moment ago; the due goals have no todos, so their turn is
the shell executor's planning turn - should-run, nothing to run, run finish: a no-op executor
whose cost is LoopX's own (one ``loopx turn`` process per turn).

The worker runs with the plugins bundled in ``plugins/`` installed and loaded (as a user who
installed them has it: their hooks are asked on every turn); the bench refuses to run without
them, and prints which plugins the worker's turns load.

Two figures, each against the issue's floor:

* **busy fraction** - of the time from the first turn's start to the last turn's end, the share
  in which the worker's 8 slots held a running turn (``busy_seconds / (active_seconds * 8)``);
  floor 90 %.
* **idle CPU** - a worker over the same registry once nothing is due: its CPU time (user +
  system, ``/proc/<pid>/stat``) over ``--idle-seconds`` of wall time; floor 1 % of one core.
  Measured with the plugins, then again with ``LOOPX_PLUGINS=""`` (the baseline, same process).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fill(url: str, goals: int, due: int) -> None:
    """``goals`` goals, ``due`` of them due now (no cadence, no run, no todos), the rest not for a day."""
    from loopx.values import clock
    from loopx.ledger import log as ledger
    from loopx.model import Event
    from loopx.ledger.registry import Registry
    from loopx.values.validate import new_id

    with Registry.open(url) as reg:
        def batch(tx):
            at = clock.now()
            rows, events, event_id = [], [], 1
            for i in range(goals):
                goal_id = new_id("goal")
                kinds = [("goal.created", "user", {"title": f"goal {i}", "description": "bench", "criteria": [],
                                                   "parallel_runs": False}),
                         ("quota.set", "user", {"limits": {"cadence_seconds": 86400}})]
                if i >= due:
                    rnd = os.urandom(18).hex()
                    run_id, contract_id = f"r-{rnd[:12]}", f"c-{rnd[12:24]}"
                    doc = {"contract_id": contract_id, "fingerprint": "sha256:bench", "issued_at": at,
                           "expires_at": clock.add_seconds(at, 3600)}
                    kinds += [("todo.added", "user", {"todo_id": f"t-{rnd[24:36]}", "text": "later",
                                                      "priority": "P1", "depends_on": []}),
                              ("run.opened", "core", {"run_id": run_id, "agent": "bench",
                                                      "expires_at": doc["expires_at"], "contract": doc}),
                              ("run.finished", "core", {"run_id": run_id, "outcome": "ok", "tokens": 0, "cost": 0,
                                                        "handoff": "done"})]
                for seq, (kind, actor, body) in enumerate(kinds, start=1):
                    events.append(Event(id=event_id, goal_id=goal_id, seq=seq, at=at, actor=actor, kind=kind,
                                        body=body, operation_id=None))
                    rows.append((event_id, goal_id, seq, at, actor, kind,
                                 json.dumps(body, sort_keys=True, separators=(",", ":"))))
                    event_id += 1
            tx.executemany("INSERT INTO events (id, goal_id, seq, at, actor, kind, body, operation_id)"
                           " VALUES (?, ?, ?, ?, ?, ?, ?, NULL)", rows)
            ledger.apply_many(tx, events)
            from loopx.ledger import integrity

            integrity.backfill(tx)  # chain the ledgers and seal every goal, as the migration does

        reg.store.write(batch)


def bundled_plugins(env: dict) -> list[str]:
    """The plugins a ``loopx`` process with ``env`` loads; exits if one of ``plugins/*`` is missing."""
    import tomllib

    want = set()
    for project in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        want |= set(tomllib.loads(project.read_text()).get("project", {}).get("entry-points", {}).get("loopx", {}))
    p = subprocess.run([sys.executable, "-m", "loopx", "plugins", "list", "--json"], env=env, capture_output=True,
                       text=True, check=True)
    loaded = [x["name"] for x in json.loads(p.stdout) if not x["builtin"]]
    missing = want - set(loaded)
    if missing:
        raise SystemExit(f"bench_worker: the bundled plugins {sorted(missing)} are not installed:"
                         " for p in plugins/*/; do pip install -e $p; done")
    return loaded


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--goals", type=int, default=10_000)
    ap.add_argument("--due", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loopx-bench-worker-"))
    url = str(work / "registry.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=url)
    loaded = bundled_plugins(env)
    print(f"plugins loaded by every turn: {', '.join(loaded)} (the bundled plugins/, installed)")
    started = time.monotonic()
    fill(url, args.goals, args.due)
    print(f"filled {args.goals:,} goals ({args.due} due) in {time.monotonic() - started:.1f}s: {url}")

    cmd = [sys.executable, "-m", "loopx", "--format", "json", "worker", "--concurrency", str(args.concurrency),
           "--exit-when-idle"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    stats = json.loads(p.stdout)
    busy = stats["busy_seconds"] / (stats["active_seconds"] * args.concurrency) if stats["active_seconds"] else 0
    print(f"turns {stats['turns']} (turn processes {stats['turn_processes']}) in {stats['active_seconds']:.1f}s"
          f" active ({stats['wall_seconds']:.1f}s with start-up);"
          f" busy fraction {busy:.1%} of {args.concurrency} slots (floor 90%)"
          f" -> {'ok' if busy >= 0.9 else 'BELOW FLOOR'}")

    # Idle, with the plugins and then without them (LOOPX_PLUGINS=""): the baseline, same registry.
    with_plugins = idle_cpu(cmd[:-1], env, args.idle_seconds)
    without = idle_cpu(cmd[:-1], {**env, "LOOPX_PLUGINS": ""}, args.idle_seconds)
    for label, frac in (("with the bundled plugins", with_plugins), ("baseline, plugins off", without)):
        print(f"idle, {label}: {frac:.2%} of a core over {args.idle_seconds:g}s (floor < 1%)"
              f" -> {'ok' if frac < 0.01 else 'ABOVE FLOOR'}")
    print(f"idle CPU with plugins / without: {with_plugins / without:.2f}x" if without else "")


def idle_cpu(cmd: list[str], env: dict, seconds: float) -> float:
    """The share of one core a worker with nothing to do uses over ``seconds`` (after its start-up)."""
    idle = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(5.0)  # past its start-up scan
    c0, t0 = cpu_seconds(idle.pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_seconds(idle.pid), time.monotonic()
    idle.send_signal(signal.SIGTERM)
    idle.communicate(timeout=60)
    return (c1 - c0) / (t1 - t0)

if __name__ == "__main__":
    main()

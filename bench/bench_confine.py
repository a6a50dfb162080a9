"""What confinement costs a step: ``python bench/bench_confine.py [--repeat N]``.

Measures, interleaved so machine load hits both sides alike, the median and p95 of:

* **child**: one ``run_command(["true"])`` the way a step starts a child: inside the step's world
  (:mod:`loopx.sandbox.world`: bubblewrap, then Landlock enforced by the watcher), and under Landlock
  alone, against the same call with no step (the watcher alone);
* **step setup**: building a step (the policy: the hidden paths' siblings listed, the policy file
  written) and starting and stopping its broker;
* **broker call**: ``loopx status`` and ``loopx evidence add`` run by a turn's confined action
  (through the broker, nested inside the ``exec`` that runs the action) against ``python -c pass``
  in the same step, interleaved; printed as a ratio (target, issue 34: at most 1.5);
* **turn**: a whole ``loopx turn`` (shell executor, one action ``true``) confined against
  ``--unconfined``.

Prints a table: median ms confined, unconfined, the extra and the ratio. The targets: at most
20 ms extra per step for Landlock (issue 22), at most 30 ms for the world (issue 35).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


#: The action of the broker-call measure: inside the confined step, times ``loopx`` calls (the
#: broker's clients) against ``python -c pass``, interleaved, and prints the medians.
PROBE = r"""
import json, os, shutil, statistics, subprocess, sys, time
loopx = shutil.which("loopx")  # what an agent runs: the step's own client, first on its PATH
calls = {"pass": [sys.executable, "-c", "pass"], "status": [loopx, "status"],
         "evidence": [loopx, "evidence", "add", "--kind", "note", "--summary", "probe"]}
times = {k: [] for k in calls}
for _ in range(int(sys.argv[1])):
    for name, argv in calls.items():
        t = time.perf_counter()
        p = subprocess.run(argv, capture_output=True)
        times[name].append((time.perf_counter() - t) * 1000)
        assert p.returncode == 0, (name, p.stdout[-300:], p.stderr[-300:])
print("PROBE " + json.dumps({k: [statistics.median(v), sorted(v)[int(0.95 * (len(v) - 1))]] for k, v in times.items()}))
"""


def broker_calls(url: str, work: Path, repeat: int) -> dict:
    """Medians and p95 (ms) of ``loopx status``, ``loopx evidence add`` and ``python -c pass``
    inside one confined step of a real ``loopx turn``."""
    from loopx.ledger.registry import Registry
    from tests.test_turn_helpers import make_goal

    with Registry.open(url) as reg:
        made = make_goal(reg, title="Probe", acts={"probe": [sys.executable, "-c", PROBE, str(repeat)]})
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_REGISTRY"] = url
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"]],
                       env=env, cwd=work, capture_output=True, text=True, timeout=600)
    assert json.loads(p.stdout)["outcome"] == "ok", p.stdout[-2000:]
    with Registry.open(url) as reg, reg.read() as tx:
        row = tx.one("SELECT data FROM evidence WHERE goal_id = ? AND kind = 'command'", (made["goal"],))
    line = next(ln for ln in json.loads(row["data"])["output_tail"].splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--turns", type=int, default=7)
    ap.add_argument("--calls", type=int, default=15, help="loopx calls of each kind inside the step")
    ap.add_argument("--quick", action="store_true", help="the child and step-setup rows only")
    args = ap.parse_args()

    from loopx.turn import confine
    from loopx.sandbox import process
    from loopx.turn.broker import Broker
    from loopx.ledger.registry import Registry
    from tests.test_turn_helpers import make_goal

    if confine.backend() is None:
        sys.exit("Landlock is not available here: nothing to compare")
    tmp = Path(tempfile.mkdtemp(prefix="loopx-bench-confine-"))
    import atexit
    import shutil

    atexit.register(shutil.rmtree, tmp, True)  # the registry, workdir and key dir of this run
    work = tmp / "work"
    work.mkdir()
    url = str(tmp / "registry.db")
    reg = Registry.open(url)
    made = make_goal(reg, acts={"noop": ["true"]}, todo_texts=[f"t{i}" for i in range(args.turns * 2 + 2)])
    rows = []

    # child: run_command in the step's world (bwrap + Landlock), under Landlock alone, and with no step
    step = confine.Step(registry_url=url, workdir=str(work), backend="landlock")
    world = confine.Step(registry_url=url, workdir=str(work), backend=confine.backend())
    conf, in_world, unconf = [], [], []

    def child():
        return process.run_command(["true"], env={}, timeout=30, cwd=str(work))

    for _ in range(args.repeat):
        for s, into in ((step, conf), (world, in_world)):
            token = process.STEP.set(s)
            try:
                into.append(_timed(child))
            finally:
                process.STEP.reset(token)
        unconf.append(_timed(child))
    rows.append((f"child in the world ({world.backend})", in_world, unconf))
    rows.append(("child, Landlock alone", conf, unconf))
    world.close()

    # step setup: policy + broker, against nothing (an unconfined turn still starts a broker)
    setup, setup_unconf = [], []
    for _ in range(args.repeat):
        def build(backend):
            s = confine.Step(registry_url=url, workdir=str(work), backend=backend)
            b = Broker(registry_url=url, run_id="r-000000000000", goal_id=made["goal"], agent="bench", directory=s.dir)
            b.close()
            s.close()
        setup.append(_timed(lambda: build(confine.backend())))
        setup_unconf.append(_timed(lambda: build(None)))
    rows.append(("step setup (policy, world, broker)", setup, setup_unconf))
    step.close()

    if args.quick:
        _table(rows)
        return
    # whole turns through the CLI
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_REGISTRY"] = url

    def turn(*extra):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"],
                            *extra], env=env, cwd=work, capture_output=True, text=True, timeout=120)
        out = json.loads(p.stdout)
        assert out["outcome"] == "ok", out

    turn()  # warm caches
    tc, tu = [], []
    for _ in range(args.turns):
        tc.append(_timed(turn))
        tu.append(_timed(lambda: turn("--unconfined")))
    rows.append(("loopx turn (shell, 1 action)", tc, tu))
    reg.close()

    calls = broker_calls(url, work, args.calls)

    _table(rows)
    print()
    print(f"inside one confined step, {args.calls} calls each, interleaved (target: ratio <= 1.5)")
    print(f"{'call':32} {'median ms':>12} {'p95 ms':>9} {'ratio to python -c pass':>24}")
    base = calls["pass"][0]
    for name, shown in (("pass", "python -c pass"), ("status", "loopx status (broker)"),
                        ("evidence", "loopx evidence add (broker)")):
        median, p95 = calls[name]
        print(f"{shown:32} {median:12.1f} {p95:9.1f} {median / base:24.2f}")


def _table(rows) -> None:
    print(f"{'measure':36} {'confined ms':>12} {'unconfined ms':>14} {'extra ms':>9} {'ratio':>6}   p95 conf/unconf")
    for name, c, u in rows:
        mc, mu = statistics.median(c), statistics.median(u)
        print(f"{name:36} {mc:12.1f} {mu:14.1f} {mc - mu:9.1f} {mc / mu:6.2f}   {_p95(c):.1f}/{_p95(u):.1f}")


if __name__ == "__main__":
    main()

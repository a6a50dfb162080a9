"""A quick in-process figure: should-run and ``evidence add`` on a goal with a long history
against a fresh goal (issue 25; the full benchmark is bench/run.py).

    python bench/bench_history.py [--events 3000] [--reps 40]

Builds, through the API (sealed chains, heads, keyed digests, the rollback anchor), one goal with
``--events`` evidence events and one fresh goal, then times ``quota.should_run`` (the agent holds
its run, so each call is the verified "run" decision of a write) and ``evidence.record`` on each,
alternating, and prints the medians and their ratio. The decision timed is asserted to be ``run``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="loopx-bench-history-")
    os.environ.setdefault("XDG_CONFIG_HOME", os.path.join(tmp, "config"))  # a key of its own
    from loopx import evidence, project_prompt, quota, todos
    from loopx.registry import Registry

    with Registry.open(os.path.join(tmp, "registry.db")) as reg:
        goals = {}
        for name in ("fresh", "long"):
            g = project_prompt.create(reg, "user", title=name)["id"]
            todos.add(reg, "user", goal_id=g, text="work")
            goals[name] = g
        start = time.perf_counter()
        for i in range(args.events):
            evidence.record(reg, "user", goal_id=goals["long"], kind="note", summary=f"n{i}")
        built = time.perf_counter() - start
        print(f"built {args.events} events in {built:.1f}s ({args.events / built:.0f} events/s)", file=sys.stderr)
        times = {f"{op} {name}": [] for op in ("should-run", "evidence add") for name in goals}
        for _ in range(args.reps):
            for name, g in goals.items():
                t = time.perf_counter()
                d = quota.should_run(reg, "user", goal_id=g, agent="bench")
                times[f"should-run {name}"].append(time.perf_counter() - t)
                assert d["decision"] == "run", d["reasons"]
                t = time.perf_counter()
                evidence.record(reg, "user", goal_id=g, kind="note", summary="x")
                times[f"evidence add {name}"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    for op in ("should-run", "evidence add"):
        print(f"{op:<13} fresh {med[op + ' fresh']:.2f} ms  long ({args.events} events) {med[op + ' long']:.2f} ms"
              f"  ratio {med[op + ' long'] / med[op + ' fresh']:.2f}")


if __name__ == "__main__":
    main()

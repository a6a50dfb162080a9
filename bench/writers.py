"""A benchmark writer process (not a benchmark itself): adds todos through LoopX's Python API.

``python bench/writers.py URL GOAL N``: N writes as fast as possible, each its own transaction, starting at
``$LOOPX_BENCH_START_AT`` (epoch seconds) when set;
prints ``{"latencies_ms": [...], "errors": k}`` (latency of each write, measured here).
``python bench/writers.py --tick URL GOAL``: one write every 100 ms until terminated (the
"writer" load of the status-server benchmark).
"""

from __future__ import annotations

import json
import os
import sys
import time

from loopx import todos
from loopx.errors import LoopxError
from loopx.registry import Registry


def main() -> None:
    args = sys.argv[1:]
    tick = args[:1] == ["--tick"]
    if tick:
        args = args[1:]
    url, goal = args[0], args[1]
    count = int(args[2]) if len(args) > 2 else 0
    latencies, errors = [], 0
    with Registry.open(url) as reg:
        # All writers start together (they are started one by one, and importing takes a while).
        start_at = float(os.environ.get("LOOPX_BENCH_START_AT") or 0)
        time.sleep(max(0.0, start_at - time.time()))
        k = 0
        while tick or k < count:
            k += 1
            start = time.perf_counter()
            try:
                todos.add(reg, "user", goal_id=goal, text=f"bench write {k}")
            except LoopxError:
                errors += 1
            latencies.append((time.perf_counter() - start) * 1000)
            if tick:
                time.sleep(max(0.0, 0.1 - (time.perf_counter() - start)))
    print(json.dumps({"latencies_ms": latencies, "errors": errors}))


if __name__ == "__main__":
    main()

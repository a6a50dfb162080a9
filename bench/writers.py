"""A benchmark writer process (not a benchmark itself): adds todos through LoopX's Python API.

``python bench/writers.py URL GOAL N``: one untimed write first (it loads the plugins and the
lazily imported modules a process's first write needs: process start-up, timed by the command
benchmarks, not write latency), then waits for ``$LOOPX_BENCH_START_AT`` (epoch seconds) when
set, then N writes as fast as possible, each its own transaction. Prints ``{"latencies_ms": [...],
"waits_ms": [...], "errors": k}``: each write's latency as its caller sees it (queueing for the
writers' lock + the transaction + commit), and how much of it was spent queueing on the lock.
``python bench/writers.py --tick URL GOAL``: one write every 100 ms until terminated (the
"writer" load of the status-server benchmark).
"""

from __future__ import annotations

import json
import os
import sys
import time

from loopx.domain import todos
from loopx.values.errors import LoopxError
from loopx.ledger.registry import Registry


def _time_the_queue(reg):
    """Wrap the SQLite store's writer queue so that each write's time spent queueing is known;
    returns a one-item list holding the last write's queueing time (s), or None."""
    store = reg.store
    if getattr(store, "dialect", None) != "sqlite":
        return None
    queue = store._writer_queue()
    if queue is None:
        return None
    waited = [0.0]
    enter = queue.enter

    def timed_enter():
        start = time.perf_counter()
        enter()
        waited[0] += time.perf_counter() - start

    queue.enter = timed_enter
    return waited


def main() -> None:
    args = sys.argv[1:]
    tick = args[:1] == ["--tick"]
    if tick:
        args = args[1:]
    url, goal = args[0], args[1]
    count = int(args[2]) if len(args) > 2 else 0
    latencies, waits, errors = [], [], 0
    with Registry.open(url) as reg:
        queue = _time_the_queue(reg)
        if not tick:
            todos.add(reg, "user", goal_id=goal, text="bench warm-up write")
        # All writers start together (they are started one by one, and importing takes a while).
        start_at = float(os.environ.get("LOOPX_BENCH_START_AT") or 0)
        time.sleep(max(0.0, start_at - time.time()))
        k = 0
        while tick or k < count:
            k += 1
            if queue is not None:
                queue[0] = 0.0
            start = time.perf_counter()
            try:
                todos.add(reg, "user", goal_id=goal, text=f"bench write {k}")
            except LoopxError:
                errors += 1
            latencies.append((time.perf_counter() - start) * 1000)
            waits.append(queue[0] * 1000 if queue is not None else 0.0)
            if tick:
                time.sleep(max(0.0, 0.1 - (time.perf_counter() - start)))
    print(json.dumps({"latencies_ms": latencies, "waits_ms": waits, "errors": errors}))


if __name__ == "__main__":
    main()

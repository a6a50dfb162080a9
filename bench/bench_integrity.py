"""Benchmark: what the tamper evidence costs `quota should-run`, in-process, at 10,000 goals.

Not a test. Fills a registry the way ``bench_should_run.py`` does, then times, on the goal in
the middle (which has an open run, so each call makes the whole decision and hands the run
back): ``integrity.verify_head`` alone, ``integrity.state_digest`` alone, and a whole
``quota.should_run`` call with the check on and with it switched off. Medians of ``--runs``
calls, in milliseconds. Usage:

    python bench/bench_integrity.py [--goals 10000] [--runs 300]

Target: the check adds < 2 ms to should-run at 10,000 goals.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

from bench_should_run import AGENT, fill  # noqa: E402


def _median_ms(fn, runs: int) -> float:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="Keep the filled registry.")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="loopx-bench-integrity-")
    try:
        run(args, os.path.join(tmp, "registry.db"))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def run(args, url: str) -> None:
    """Fill ``url`` and print the table."""
    from loopx.ledger import integrity
    from loopx.views.should_run import should_run
    from loopx.ledger.registry import Registry

    started = time.perf_counter()
    goal_id = fill(url, args.goals)
    print(f"{args.goals} goals filled in {time.perf_counter() - started:.1f} s")
    with Registry.open(url) as reg:
        def verify():
            with reg.read() as tx:
                assert integrity.verify_head(tx, goal_id) == []

        def digest():
            with reg.read() as tx:
                integrity.state_digest(tx, goal_id)

        def decide():
            assert should_run(reg, "user", goal_id=goal_id, agent=AGENT)["decision"] == "run"

        real = integrity.verify_head
        rows = {}
        for _ in range(2):  # interleaved rounds, so load on the machine hits both alike
            rows.setdefault("verify_head (head, 4 events, digest)", []).append(_median_ms(verify, args.runs))
            rows.setdefault("state_digest alone", []).append(_median_ms(digest, args.runs))
            rows.setdefault("should_run, integrity on", []).append(_median_ms(decide, args.runs))
            integrity.verify_head = lambda tx, goal_id, **kw: []
            try:
                rows.setdefault("should_run, check off (seal still on)", []).append(_median_ms(decide, args.runs))
            finally:
                integrity.verify_head = real
    print(f"{'case':<45} median ms")
    for name, values in rows.items():
        print(f"{name:<45} {min(values):8.3f}")
    on, off = min(rows["should_run, integrity on"]), min(rows["should_run, check off (seal still on)"])
    print(f"check adds {on - off:.3f} ms to an in-process should-run ({'met' if on - off < 2 else 'MISSED'}: < 2 ms)")


if __name__ == "__main__":
    main()

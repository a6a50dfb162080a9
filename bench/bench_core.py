"""Benchmark: `project_prompt show` and `list --json` on a registry of 10,000 goals.

Not a test. Prints a table of medians over several runs, each beside two floors measured in
the same run: `python -c pass` and a bare import of LoopX's libraries. Usage:

    python bench/bench_core.py [--goals 10000] [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

IMPORT_FLOOR = "import click, pluggy, attrs, cattrs, platformdirs, sqlite3"


def fill(url: str, n: int) -> str:
    """Create ``n`` goals through the Python API; return the id of one in the middle."""
    from loopx import project_prompt
    from loopx.registry import Registry

    middle = None
    with Registry.open(url) as reg:
        for i in range(n):
            goal = project_prompt.create(reg, "user", title=f"goal {i}", description="benchmark goal",
                                         criteria=["a criterion"])
            if i == n // 2:
                middle = goal["id"]
    return middle


def time_ms(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def measure(cases: dict[str, list[str]], env: dict, runs: int) -> dict[str, float]:
    """Median wall time of each case; cases are interleaved so drift hits them all alike."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for name, argv in cases.items():  # warm the page cache and the plugin cache once
        time_ms(argv, env)
    for _ in range(runs):
        for name, argv in cases.items():
            samples[name].append(time_ms(argv, env))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="loopx-bench-")
    url = os.path.join(tmp, "registry.db")
    started = time.perf_counter()
    goal_id = fill(url, args.goals)
    fill_s = time.perf_counter() - started
    env = {**os.environ, "LOOPX_REGISTRY": url}
    env.pop("LOOPX_ACTOR", None)
    py = sys.executable
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "import floor": [py, "-c", IMPORT_FLOOR],
        "project_prompt show": [py, "-m", "loopx", "project_prompt", "show", "--goal-id", goal_id],
        "project_prompt list --json": [py, "-m", "loopx", "project_prompt", "list", "--json"],
    }
    medians = measure(cases, env, args.runs)
    floor = medians["import floor"]
    print(f"registry: {args.goals} goals, filled in {fill_s:.1f} s ({args.goals / fill_s:.0f} goals/s); "
          f"{args.runs} runs per case, median wall time of a whole process")
    print(f"{'case':<30} {'median ms':>10} {'x import floor':>15}")
    for name, ms in medians.items():
        print(f"{name:<30} {ms:>10.1f} {ms / floor:>15.2f}")
    show = medians["project_prompt show"]
    print(f"targets: show < 100 ms ({'met' if show < 100 else 'MISSED'}), "
          f"show < 1.25x floor ({'met' if show / floor < 1.25 else 'MISSED'})")


if __name__ == "__main__":
    main()

"""Benchmark: `project_prompt show` and `list --json` on a registry of 10,000 goals.

Not a test. Prints a table of medians over several runs, each beside two floors measured in
the same run: `python -c pass` and a bare import of LoopX's libraries. Usage:

    python bench/bench_core.py [--goals 10000] [--runs 15] [--keep]

The registry lives in a temp directory that is removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from timing import child_env, floors, measure, print_table, scratch_dir


def fill(url: str, n: int) -> str:
    """Create ``n`` goals through the Python API; return the id of one in the middle."""
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    middle = None
    from loopx.values.progress import counted

    with Registry.open(url) as reg:
        for i in counted(range(n), n, f"filling {n:,} goals"):  # a bar on a terminal only
            goal = project_prompt.create(reg, "user", title=f"goal {i}", description="benchmark goal",
                                         criteria=["a criterion"])
            if i == n // 2:
                middle = goal["id"]
    return middle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the filled registry (its path is printed)")
    args = parser.parse_args()
    with scratch_dir("core", keep=args.keep) as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    """Fill a registry in ``tmp`` and time the commands on it."""
    url = os.path.join(tmp, "registry.db")
    started = time.perf_counter()
    goal_id = fill(url, args.goals)
    fill_s = time.perf_counter() - started
    env = child_env(LOOPX_REGISTRY=url)
    loopx = [sys.executable, "-m", "loopx"]
    cases = {
        **floors(env),
        "project_prompt show": ([*loopx, "project_prompt", "show", "--goal-id", goal_id], env),
        "project_prompt list --json": ([*loopx, "project_prompt", "list", "--json"], env),
    }
    medians = measure(cases, args.runs)
    floor = medians["import floor"]
    print(f"registry: {args.goals} goals, filled in {fill_s:.1f} s ({args.goals / fill_s:.0f} goals/s); "
          f"{args.runs} runs per case, median wall time of a whole process")
    print_table(medians)
    show = medians["project_prompt show"]
    print(f"targets: show < 100 ms ({'met' if show < 100 else 'MISSED'}), "
          f"show < 1.25x floor ({'met' if show / floor < 1.25 else 'MISSED'})")


if __name__ == "__main__":
    main()

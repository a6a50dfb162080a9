"""Benchmark: 8 concurrent writers on a registry of ``N`` goals (the bulk fill, cached), alone.

Not a test. The same measurement as ``bench/run.py``'s writers table, without the rest of the
run: ``python bench/writers_at.py 100000 [--writes 100]``. Prints the row as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import run as full
from timing import child_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("goals", type=int)
    parser.add_argument("--writes", type=int, default=100)
    args = parser.parse_args()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    url = full.sqlite_registry(args.goals, log)
    full.assert_real_decision(url, full.sample_goals(url)[0], child_env())
    print(json.dumps(full.writers(url, child_env(), writes=args.writes), indent=1))


if __name__ == "__main__":
    main()

"""Should-run's start-up in instructions: ``python bench/bench_instructions.py [--runs 3] [--base PYTHON]``.

Not a test. Wall and CPU time on a shared machine move by tens of percent from run to run; the
number of instructions a process executes does not. This counts them with valgrind's callgrind
(``--trace-children=no``) for:

* the import floor (``import click, pluggy, attrs, cattrs, platformdirs, sqlite3``);
* ``quota should-run --format json`` **opening a new run** (each count on a goal of its own that
  has none yet), by this tree's interpreter and, with ``--base PYTHON``, by another virtualenv's
  (one where ``main`` is installed, editable, as here) on the same registry;

and prints the medians of ``--runs`` counts and their ratio to the floor (budget: at most 1.25x,
docs/performance.md). Before counting, each tree's ``loopx`` and plugins are compiled to bytecode
(an installed LoopX runs from bytecode) and each command runs once uncounted (the entry-point
cache). ``--keep`` keeps the callgrind files (their directory is printed) for
``callgrind_annotate --inclusive=yes FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from bench_startup import AGENT, fill
from timing import IMPORT_FLOOR, child_env, enter_scratch, scratch_dir

BUDGET = 1.25


def instructions(argv: list[str], env: dict, out: str) -> int:
    """Instructions executed by one process (``argv``), counted by callgrind into the file ``out``.

    A should-run must answer ``run`` (it opened the run it is counted for): anything else, such
    as a contract hook that ran past its deadline under valgrind and failed closed, stops the
    benchmark instead of being counted.
    """
    grind = ["valgrind", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={out}"]
    r = subprocess.run(grind + argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{argv} exited with {r.returncode}: {r.stderr[-2000:]}")
    if "should-run" in argv and json.loads(r.stdout)["decision"] != "run":
        raise SystemExit(f"{argv} did not open a run: {r.stdout[:2000]}")
    with open(out) as f:
        found = re.search(r"^summary:\s*(\d+)", f.read(), re.M)
    if not found:
        raise SystemExit(f"no summary in {out}")
    return int(found.group(1))


def compile_tree(python: str, env: dict) -> None:
    """Compile the LoopX that ``python`` imports, and its plugins, to bytecode (as pip does on install)."""
    code = ("import os, sys, compileall, loopx; root = os.path.dirname(os.path.dirname(loopx.__file__)); "
            "[compileall.compile_dir(os.path.join(root, d), quiet=1) for d in ('loopx', 'plugins')]")
    subprocess.run([python, "-c", code], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="counts of each case (the median is shown)")
    parser.add_argument("--base", help="another virtualenv's python to count beside this one (main installed)")
    parser.add_argument("--keep", action="store_true", help="keep the registry and the callgrind files")
    args = parser.parse_args()
    with scratch_dir("instructions", keep=args.keep) as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    """Fill a registry in ``tmp``, count each case ``--runs`` times, print the table."""
    url, trees = enter_scratch(tmp, args)
    goals = iter(fill(url, (args.runs + 1) * len(trees)))
    base_env = child_env(XDG_CONFIG_HOME=os.environ["XDG_CONFIG_HOME"])
    counts: dict[str, list[int]] = {"import floor": []}
    cases = {"import floor": ([sys.executable, "-c", IMPORT_FLOOR], base_env)}
    for n, (label, py) in enumerate(trees.items()):
        # Under valgrind a process runs ~50x slower: the contract hooks' deadline (2 s) is lifted,
        # so that what is counted is the veto answered, not a timeout failing closed.
        env = {**base_env, "XDG_CACHE_HOME": os.path.join(tmp, f"cache-{n}"), "LOOPX_AGENT": AGENT,
               "LOOPX_REGISTRY": url, "LOOPX_HOOK_TIMEOUT": "600"}
        compile_tree(py, env)
        cases[f"should-run ({label})"] = ([py, "-m", "loopx", "--format", "json", "quota", "should-run",
                                            "--goal-id", "{goal}"], env)
        counts[f"should-run ({label})"] = []
    for name, (argv, env) in cases.items():  # once uncounted: bytecode, the entry-point cache
        subprocess.run([next(goals) if a == "{goal}" else a for a in argv], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    for i in range(args.runs):
        for name, (argv, env) in cases.items():
            out = os.path.join(tmp, f"callgrind.{name.replace(' ', '_').strip('()')}.{i}")
            counts[name].append(instructions([next(goals) if a == "{goal}" else a for a in argv], env, out))
    _print(args, counts)


def _print(args, counts: dict[str, list[int]]) -> None:
    floor = statistics.median(counts["import floor"])
    print(f"callgrind, {args.runs} counts of each, Python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print()
    print("| case | median Ir | min..max | x import floor | budget |")
    print("|---|---:|---:|---:|---|")
    for name, values in counts.items():
        med = statistics.median(values)
        spread = f"{min(values) / 1e6:.1f}..{max(values) / 1e6:.1f} M"
        if name == "import floor":
            print(f"| {name} | {med / 1e6:.1f} M | {spread} | 1.00 | |")
            continue
        ratio = med / floor
        verdict = "met" if ratio <= BUDGET else "MISSED"
        print(f"| {name} | {med / 1e6:.1f} M | {spread} | {ratio:.3f} | <= {BUDGET} ({verdict}, "
              f"{BUDGET * floor / 1e6:.1f} M) |")


if __name__ == "__main__":
    main()

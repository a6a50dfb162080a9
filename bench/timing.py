"""Timing helpers shared by the benchmark scripts in ``bench/`` (not a benchmark itself).

Each benchmark times whole processes (``python -m loopx ...``) beside two floors measured in the
same run: ``python -c pass`` and a bare import of LoopX's libraries. The scripts are run as
``python bench/bench_x.py``, which puts this directory first on ``sys.path``, so they import this
module as ``timing``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

IMPORT_FLOOR = "import click, pluggy, attrs, cattrs, platformdirs, sqlite3"

Case = tuple[list[str], dict]  # (argv, environment) of one timed process


def child_env(**extra: str) -> dict:
    """The environment for timed processes: this one without ``LOOPX_*``, plus ``extra``.

    ``PYTHONDONTWRITEBYTECODE`` is dropped too: an installed LoopX runs from bytecode (pip
    compiles on install), as its libraries do; with it set, every call would recompile LoopX's
    sources and measure that.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def floors(env: dict) -> dict[str, Case]:
    """The two floor cases, ``python -c pass`` and the import floor, run with ``env``."""
    return {
        "python -c pass": ([sys.executable, "-c", "pass"], env),
        "import floor": ([sys.executable, "-c", IMPORT_FLOOR], env),
    }


def time_ms(argv: list[str], env: dict) -> float:
    """Wall time of one whole process, in milliseconds; its output is discarded, a failure raises."""
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def measure(cases: dict[str, Case], runs: int) -> dict[str, float]:
    """Median wall time (ms) of each case over ``runs`` runs, after one warm-up run of each.

    The cases are interleaved (one run of each, ``runs`` times over) so drift hits them all alike.
    """
    for argv, env in cases.values():  # warm the page cache, the plugin cache and server buffers
        time_ms(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (argv, env) in cases.items():
            samples[name].append(time_ms(argv, env))
    return {name: statistics.median(values) for name, values in samples.items()}


def print_table(medians: dict[str, float], width: int = 30) -> None:
    """Print each case's median and its ratio to the ``import floor`` case."""
    floor = medians["import floor"]
    print(f"{'case':<{width}} {'median ms':>10} {'x import floor':>15}")
    for name, ms in medians.items():
        print(f"{name:<{width}} {ms:>10.1f} {ms / floor:>15.2f}")


@contextlib.contextmanager
def scratch_dir(name: str, keep: bool = False):
    """A new ``loopx-bench-<name>-*`` temp directory for a benchmark's registries.

    Removed when the benchmark ends, also on an error or Ctrl-C, unless ``keep`` (then its path
    is printed). Benchmarks leave nothing behind in /tmp.
    """
    path = tempfile.mkdtemp(prefix=f"loopx-bench-{name}-")
    try:
        yield path
    finally:
        if keep:
            print(f"kept {path}", file=sys.stderr)
        else:
            shutil.rmtree(path, ignore_errors=True)


def enter_scratch(tmp: str, args) -> tuple[str, dict[str, str]]:
    """Make ``tmp`` this bench's world: its config directory (the registry's key, for every
    process), this checkout first on ``sys.path``, ``tmp`` the working directory. Returns the
    registry's path in it and the trees to measure (``{"this tree": python, "base": --base}``)."""
    os.environ["XDG_CONFIG_HOME"] = os.path.join(tmp, "config")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.chdir(tmp)
    return os.path.join(tmp, "registry.db"), {"this tree": sys.executable, **({"base": args.base} if args.base else {})}

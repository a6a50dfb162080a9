"""Start-up against the documented budgets: ``python bench/bench_startup.py [--runs 15] [--base TREE]``.

Not a test. Times whole processes, interleaved (one run of each case per round, so load that
comes and goes hits every case alike), and prints medians of wall time and of CPU time (user +
sys of the process and its children, from ``wait4``) beside two baselines measured in the same
run:

* ``quota should-run --format json`` **opening a new run** (each round asks on a goal of its own
  that has none yet), against the import floor (``import click, pluggy, attrs, cattrs,
  platformdirs, sqlite3``); budget: at most 1.25x (docs/performance.md);
* ``loopx status`` run by the **in-turn client** (the ``loopx`` a step finds first on its
  ``PATH``, :func:`loopx.sandbox.broker_client.write_client`) through a real broker serving in this
  process, against ``python -c pass``; budget: at most 1.5x.

Then ``-X importtime`` of each command (medians over ``--importtime`` runs): how many modules it
imports, their total own time, and the cumulative time of the modules the budgets are about.

``--base PYTHON`` adds the same commands run by another virtualenv's interpreter (one where
``main`` is installed: ``git archive main | tar -x -C DIR``, then ``pip install -e DIR`` and its
plugins) to the same rounds, so a change and its base are compared under the same load. The
processes run in the temp directory, so that no ``loopx`` in the working directory shadows the
installed one. The registry, the keys and the plugin caches live in a ``loopx-bench-*``
temp directory removed at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from timing import IMPORT_FLOOR, child_env, enter_scratch, scratch_dir

AGENT = "bench-agent"
#: Modules whose cumulative import time the -X importtime table shows (what the budgets are about).
WATCHED = ("datetime", "hashlib", "socket", "signal", "enum", "platformdirs", "tempfile", "loopx.values.userdirs")


def spawn(argv: list[str], env: dict) -> tuple[float, float, int]:
    """Run one process with its output discarded: ``(wall ms, CPU ms, exit status)``."""
    out = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=out)
    _, status, usage = os.wait4(pid, 0)
    wall = (time.perf_counter() - start) * 1000
    return wall, (usage.ru_utime + usage.ru_stime) * 1000, os.waitstatus_to_exitcode(status)


def importtime(argv: list[str], env: dict) -> dict[str, tuple[int, int]]:
    """``{module: (own us, cumulative us)}`` of one ``python -X importtime`` run of ``argv``."""
    import subprocess

    r = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True)
    found = {}
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, cumulative, name = line[len("import time:"):].split("|")
            found[name.strip()] = (int(own), int(cumulative))
    return found


def fill(url: str, goals: int) -> list[str]:
    """``goals`` goals, each with a todo and nothing run yet: should-run on one opens a run."""
    from loopx.domain import goals as project_prompt
    from loopx.domain import todos
    from loopx.ledger.registry import Registry

    made = []
    with Registry.open(url) as reg:
        for i in range(goals):
            g = project_prompt.create(reg, "user", title=f"goal {i}", description="start-up bench",
                                      criteria=["a criterion"])["id"]
            todos.add(reg, "user", goal_id=g, text="do the thing")
            made.append(g)
    return made


def client(python: str, directory: str, env: dict) -> str:
    """The in-turn ``loopx`` client of ``python``'s LoopX, written into ``directory`` by its own code."""
    import subprocess

    os.mkdir(directory)
    code = "import sys; from loopx.sandbox.broker_client import write_client; print(write_client(sys.argv[1]))"
    out = subprocess.run([python, "-c", code, directory], env=env, capture_output=True, text=True, check=True)
    return os.path.join(out.stdout.strip(), "loopx")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds (each runs every case once)")
    parser.add_argument("--importtime", type=int, default=5, help="-X importtime runs of each command")
    parser.add_argument("--base", help="another virtualenv's python to time beside this one (main installed)")
    parser.add_argument("--keep", action="store_true", help="keep the registry (its directory is printed)")
    args = parser.parse_args()
    with scratch_dir("startup", keep=args.keep) as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    """Fill a registry in ``tmp``, start a broker, time the cases, print the tables."""
    url, trees = enter_scratch(tmp, args)
    from loopx.turn.broker import Broker
    from loopx.cli import run_inprocess

    goals = fill(url, (args.runs + 1 + args.importtime) * len(trees))
    broker_dir = os.path.join(tmp, "broker")
    os.mkdir(broker_dir)
    broker = Broker(registry_url=url, run_id="r-000000000000", goal_id=goals[0], agent=AGENT, directory=broker_dir,
                    run_cli=run_inprocess)  # serving in this process, as a turn's broker does
    try:
        cases, envs = _cases(args, tmp, url, trees, broker)
        walls, cpus = _rounds(cases, envs, goals, args.runs)
        imports = {name: _importtimes(cases[name], envs[name], goals, args.importtime)
                   for name in cases if name.startswith(("should-run", "client"))}
    finally:
        broker.close()
    _print(args, trees, walls, cpus, imports)


def _cases(args, tmp: str, url: str, trees: dict, broker) -> tuple[dict, dict]:
    """``{case: argv}`` (``{goal}`` stands for the round's goal) and ``{case: environment}``."""
    base_env = child_env(XDG_CONFIG_HOME=os.environ["XDG_CONFIG_HOME"])
    cases = {"python -c pass": [sys.executable, "-c", "pass"], "import floor": [sys.executable, "-c", IMPORT_FLOOR]}
    envs = {"python -c pass": base_env, "import floor": base_env}
    for label, py in trees.items():
        # Each interpreter its own entry-point cache (it is keyed on sys.path).
        env = {**base_env, "XDG_CACHE_HOME": os.path.join(tmp, f"cache-{len(envs)}"), "LOOPX_AGENT": AGENT}
        cases[f"should-run ({label})"] = [py, "-m", "loopx", "--format", "json", "quota", "should-run",
                                          "--goal-id", "{goal}"]
        envs[f"should-run ({label})"] = {**env, "LOOPX_REGISTRY": url}
        # As its ``#!`` line starts it (written out, so that -X importtime can be added).
        script = client(py, os.path.join(tmp, f"client-{len(envs)}"), env)
        cases[f"client status ({label})"] = [py, "-I", "-S", script, "status"]
        envs[f"client status ({label})"] = {**env, **broker.env()}
    return cases, envs


def _rounds(cases: dict, envs: dict, goals: list[str], runs: int) -> tuple[dict, dict]:
    """Every case once per round (a warm-up round first, not counted); each should-run on a new goal."""
    fresh = iter(goals)
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for round_no in range(runs + 1):
        for name, argv in cases.items():
            argv = [next(fresh) if a == "{goal}" else a for a in argv]
            wall, cpu, status = spawn(argv, envs[name])
            if status != 0:
                raise SystemExit(f"{name} exited with {status}: {argv}")
            if round_no:
                walls[name].append(wall)
                cpus[name].append(cpu)
    return walls, cpus


def _importtimes(argv: list[str], env: dict, goals: list[str], runs: int) -> dict:
    """Medians over ``runs`` -X importtime runs: module count, total own ms, each watched module's ms."""
    seen = []
    for _ in range(runs):
        goal = goals.pop()  # from the end: the rounds took theirs from the start
        seen.append(importtime([goal if a == "{goal}" else a for a in argv], env))
    out = {"modules": statistics.median(len(s) for s in seen),
           "own ms": statistics.median(sum(own for own, _ in s.values()) for s in seen) / 1000}
    for name in WATCHED:
        out[name] = statistics.median(s[name][1] if name in s else 0 for s in seen) / 1000
    return out


def _print(args, trees: dict, walls: dict, cpus: dict, imports: dict) -> None:
    wall = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    load = os.getloadavg()
    print(f"{args.runs} rounds, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print()
    print(f"| case | wall median ms | CPU median ms | baseline | x baseline (wall) | x baseline (CPU) | budget |")
    print("|---|---:|---:|---|---:|---:|---|")
    for name in wall:
        base, budget = ("import floor", 1.25) if name.startswith("should-run") else \
            ("python -c pass", 1.5) if name.startswith("client") else (None, None)
        if base is None:
            print(f"| {name} | {wall[name]:.1f} | {cpu[name]:.1f} | | | | |")
            continue
        rw, rc = wall[name] / wall[base], cpu[name] / cpu[base]
        verdict = "met" if rw <= budget else "MISSED"
        print(f"| {name} | {wall[name]:.1f} | {cpu[name]:.1f} | {base} | {rw:.2f} | {rc:.2f} "
              f"| <= {budget} ({verdict}) |")
    print()
    print(f"-X importtime, medians of {args.importtime} runs (cumulative ms of each module; 0: not imported)")
    print()
    print("| command | modules | own ms | " + " | ".join(WATCHED) + " |")
    print("|---|---:|---:|" + "---:|" * len(WATCHED))
    for name, row in imports.items():
        print(f"| {name} | {row['modules']:.0f} | {row['own ms']:.1f} | "
              + " | ".join(f"{row[m]:.1f}" for m in WATCHED) + " |")


if __name__ == "__main__":
    main()

"""Benchmark: Issue-Fix's base run + verify on a 1,500-test suite, against plain pytest run twice.

Not a test: it prints a table and asserts nothing. Verifying a fix takes two runs of the suite:
the base run (``reproduce``, on a clean copy of the reproduction tree, recording every test id
and the files it opened) and the candidate run (``verify``, on a clean copy of the fixed tree,
compared test by test). Each step is timed as a whole ``loopx issue-fix`` process, beside running
the same suite twice with plain ``python -m pytest -q -p no:cacheprovider`` in the repository
(which keeps its ``__pycache__`` between runs), measured in the same process, interleaved:

- **new base**: a goal on a commit no goal ran before (each round commits a one-line change to
  a file the tests do not read), so the base run really runs (cold: it compiles the tree);
- **same base again**: a second goal on that commit, started by hand outside an agent's turn,
  takes over the first one's base run (``reproduce`` reads the recorded results, see
  ``loopx_issue_fix/baserun.py``); its verify still runs the suite;
- **new base in a turn**: another new commit, whose base run an agent makes inside its turn
  (``loopx turn --executor command``, the turn timed whole); the run is private
  (``loopx_issue_fix/treerun.py``), so it starts warm from the previous shared base and is
  shared itself;
- **first in the repository** (every round, in a repository of its own made for that round): no
  earlier base run to start warm from; compared with plain pytest's first two runs in a fresh
  copy of that repository (the first without ``__pycache__``: it compiles and assertion-rewrites
  every test module, the second reads them), timed run by run beside ``reproduce`` and
  ``verify``. The two alternate which goes first from round to round.

A new base's run starts warm from the previous round's shared base (its test modules are
unchanged), as plain pytest does from its ``__pycache__``.

Prints medians (wall and CPU = user + system seconds of the processes) and the ratio to plain
pytest twice; the issue's target is at most 1.3 for a new base. Usage:

    python bench/bench_issue_fix_verify.py [--tests 1500] [--runs 5] [--keep]

Everything lives in a temp directory removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from timing import child_env, scratch_dir

PER_FILE = 50


def make_suite(root: Path, tests: int, name: str = "suite") -> Path:
    """A git repository ``root/name`` with ``lib.double`` (wrong for 7) and ``tests`` tests in modules of 50."""
    repo = root / name
    (repo / "tests").mkdir(parents=True)
    (repo / "lib.py").write_text("def double(x):\n    return x * 2 if x != 7 else 15\n")
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    for n in range(-(-tests // PER_FILE)):
        body = "".join(f"def test_double_{n}_{i}():\n    from lib import double\n    assert double({n * PER_FILE + i})"
                       f" == {2 * (n * PER_FILE + i)}\n\n\n" for i in range(min(PER_FILE, tests - n * PER_FILE)))
        (repo / "tests" / f"test_m{n:03d}.py").write_text(body)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "suite"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    return repo


def loopx(env: dict, *args: str, ok=(0,)) -> dict:
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], env=env, capture_output=True,
                       text=True)
    if p.returncode not in ok:
        raise SystemExit(f"loopx {' '.join(args)} exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    return json.loads(p.stdout) if p.stdout.strip() else {}


CPU: list[float] = []  # CPU seconds (user + system) of the children of each timed section


def timed(fn) -> float:
    """Wall seconds of ``fn()``; its children's CPU seconds are added to the last :data:`CPU` entry."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[-1] += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall


# The agent of an in-turn base run: runs the contract's ```sh block (its reproduce step).
AGENT = r'''
import os, re, subprocess
block = re.search(r"```sh\n(.*?)\n```", open(os.environ["LOOPX_PROMPT_FILE"]).read(), re.S).group(1)
for line in block.splitlines():
    subprocess.run(line, shell=True, check=False)
'''


def one_goal(env: dict, repo: Path, n: int, in_turn: bool = False) -> dict[str, tuple[float, float]]:
    """Start a goal, then time its reproduce and its verify (each a whole process):
    ``{step: (wall s, CPU s)}``. ``in_turn``: the reproduce is an agent's, inside a whole
    ``loopx turn --executor command`` (timed as that turn: broker, confinement and all)."""
    out = loopx(env, "issue-fix", "start", "--repo", str(repo), "--title", f"bench {n}", "--issue-text", "double(7)",
                "--test-command", f"{shlex.quote(sys.executable)} -m pytest -q", "--test-timeout", "600")
    g, wt = out["goal_id"], Path(out["worktree"])
    agent = {**env, "LOOPX_ACTOR": "executor"}
    times = {}
    if in_turn:
        script = repo.parent / "agent.py"
        script.write_text(AGENT)
        turn_env = {**env, "LOOPX_EXECUTOR_COMMAND": json.dumps([sys.executable, str(script)]),
                    "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"}
        CPU.append(0.0)
        wall = timed(lambda: loopx(turn_env, "turn", "--goal-id", g, "--executor", "command"))
        times["reproduce"] = (wall, CPU.pop())
    for edit in ((None,) if not in_turn else ()) + ("def double(x):\n    return x * 2\n",):
        if edit:
            (wt / "lib.py").write_text(edit)
        doc = loopx(agent, "quota", "should-run", "--goal-id", g)
        run = doc["interaction_contract"]["run_id"]
        step = "verify" if edit else "reproduce"
        CPU.append(0.0)
        wall = timed(lambda: loopx(agent, "issue-fix", step, "--run-id", run, "--timeout", "600"))  # exit 0: green
        times[step] = (wall, CPU.pop())
        loopx(agent, "run", "finish", "--run-id", run)
    if in_turn:
        # The turn machinery alone (contract, broker, policy, the agent process; the goal now
        # waits for its hand-off): an agent that does nothing.
        idle = repo.parent / "idle.py"
        idle.write_text("")
        CPU.append(0.0)
        wall = timed(lambda: loopx({**turn_env, "LOOPX_EXECUTOR_COMMAND": json.dumps([sys.executable, str(idle)])},
                                   "turn", "--goal-id", g, "--executor", "command", ok=(0, 1, 3)))
        times["idle turn"] = (wall, CPU.pop())
    loopx(env, "issue-fix", "close", "--goal-id", g)
    return times


def plain_runs(repo: Path, runs: int = 2) -> list[tuple[float, float]]:
    """``runs`` runs of plain pytest in ``repo`` (keeping its ``__pycache__``): ``[(wall s, CPU s)]``."""
    env = child_env()

    def run():
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    out = []
    for _ in range(runs):
        CPU.append(0.0)
        wall = timed(run)
        out.append((wall, CPU.pop()))
    return out


def plain_twice(repo: Path) -> tuple[float, float]:
    """Plain pytest run twice in ``repo``: ``(wall s, CPU s)`` of both."""
    first, second = plain_runs(repo)
    return first[0] + second[0], first[1] + second[1]


def first_in_repository(root: Path, env: dict, tests: int, n: int) -> dict[str, tuple[float, float]]:
    """Round ``n`` of the first-in-the-repository case: a new repository of its own (no earlier base
    run to start warm from), its first goal's reproduce and verify, and plain pytest's first two
    runs in a copy of it made before anything ran there (no ``__pycache__``), in alternating order."""
    import shutil

    repo = make_suite(root / f"first-{n}", tests)
    copy = root / f"first-{n}" / "plain"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    out: dict[str, tuple[float, float]] = {}
    for part in ("plain", "goal") if n % 2 else ("goal", "plain"):
        if part == "plain":
            cold, warm = plain_runs(copy)
            out |= {"plain cold": cold, "plain warm": warm}
        else:
            t = one_goal(env, repo, 10_000 + n)
            out |= {"reproduce": t["reproduce"], "verify": t["verify"]}
    return out


def new_base(repo: Path, n: int) -> None:
    """A new commit (a file no test reads changes): no goal ran this base before."""
    (repo / "ROUND").write_text(f"{n}\n")
    for args in (["add", "ROUND"], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", f"round {n}"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    with scratch_dir("issue-fix", args.keep) as tmp:
        root = Path(tmp)
        repo = make_suite(root, args.tests)
        env = child_env(LOOPX_REGISTRY=str(root / "registry.db"), LOOPX_ISSUE_FIX_WORKTREES=str(root / "worktrees"))
        rows: dict[str, list[tuple[float, float]]] = {}

        def add(name, value):
            rows.setdefault(name, []).append(value)

        def both(a, b):
            return tuple(x + y for x, y in zip(a, b))

        for n in range(1, args.runs + 1):  # interleaved, so drift hits all cases alike
            # The first runs in a new repository: plain pytest has no __pycache__ of the suite yet,
            # Issue-Fix no earlier base run to start warm from.
            f = first_in_repository(root, env, args.tests, n)
            add("first in the repository: plain twice", both(f["plain cold"], f["plain warm"]))
            add("first in the repo.: plain 1st run (cold)", f["plain cold"])
            add("first in the repo.: plain 2nd run (warm)", f["plain warm"])
            add("first in the repo.: reproduce (cold)", f["reproduce"])
            add("first in the repo.: verify", f["verify"])
            add("first in the repository: reproduce + verify", both(f["reproduce"], f["verify"]))
            new_base(repo, n)
            add("plain pytest, twice", plain_twice(repo))
            for case, goal in (("new base", 2 * n - 1), ("same base again", 2 * n)):
                t = one_goal(env, repo, goal)
                add(f"{case}: reproduce", t["reproduce"])
                add(f"{case}: verify", t["verify"])
                add(f"{case}: reproduce + verify", tuple(a + b for a, b in zip(t["reproduce"], t["verify"])))
            # Another new base, reproduced by an agent inside its turn: private, so shared and warm.
            new_base(repo, 1000 + n)
            t = one_goal(env, repo, 1000 + n, in_turn=True)
            add("new base in a turn: reproduce (whole turn)", t["reproduce"])
            add("new base in a turn: reproduce + verify", tuple(a + b for a, b in zip(t["reproduce"], t["verify"])))
            add("an idle turn (the turn machinery alone)", t["idle turn"])
            add("new base in a turn, less the idle turn", tuple(a + b - c for a, b, c in
                                                                zip(t["reproduce"], t["verify"], t["idle turn"])))
        med = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
               for name, v in rows.items()}
        a, ca = med["plain pytest, twice"]
        first = med["first in the repository: plain twice"]
        # The ratio of the medians, and the median of each round's own ratio (the pair measured
        # back to back, so load that moves between rounds cancels out).
        ratios = [(g[0] / p[0], g[1] / p[1]) for g, p in zip(rows["first in the repository: reproduce + verify"],
                                                             rows["first in the repository: plain twice"])]
        print(f"{args.tests:,} tests, median of {args.runs} runs (python {sys.version.split()[0]}, "
              f"{os.cpu_count()} cpu, load {os.getloadavg()[0]:.1f}); CPU = user + system seconds of the processes; "
              f"x = ratio to plain twice (first in the repository: to plain's first two runs in a fresh copy)")
        print(f"{'case':<48} {'wall s':>8} {'x plain':>8} {'CPU s':>8} {'x plain':>8}")
        for name, (w, c) in med.items():
            ref_w, ref_c = first if name.startswith("first") else (a, ca)
            print(f"{name:<48} {w:>8.2f} {w / ref_w:>8.2f} {c:>8.2f} {c / ref_c:>8.2f}")
        print("first in the repository, each round's reproduce + verify / plain twice (wall, CPU): "
              + ", ".join(f"{w:.2f} {c:.2f}" for w, c in ratios)
              + f"; median {statistics.median(w for w, _ in ratios):.2f} wall, "
              f"{statistics.median(c for _, c in ratios):.2f} CPU")
        # The same for the other cases: each round's figure against that round's plain pair (the
        # suite's cost drifts with the machine from round to round; the pair measured minutes
        # apart drifts less).
        for name in ("new base: reproduce + verify", "new base in a turn: reproduce + verify",
                     "new base in a turn, less the idle turn"):
            own = [(g[0] / p[0], g[1] / p[1]) for g, p in zip(rows[name], rows["plain pytest, twice"])]
            print(f"{name}, each round / that round's plain twice (CPU): "
                  + ", ".join(f"{c:.2f}" for _, c in own) + f"; median {statistics.median(c for _, c in own):.2f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()

"""Benchmark: `quota should-run --format json` at 10 and 10,000 goals, beside two floors.

Not a test. Fills two registries through the Python API (every goal with a budget, three todos
and two allowed actions; the measured goal has an open run of the asking agent, so each call
makes the whole decision, recomputes the fingerprint and hands the run back), then prints the
median wall time of whole `python -m loopx --format json quota should-run --goal-id G`
processes beside `python -c pass` and a bare import of LoopX's libraries, measured in the same
run with the cases interleaved. Usage:

    python bench/bench_should_run.py [--goals 10000] [--small 10] [--runs 15] [--keep]

The registries live in a temp directory that is removed at the end unless ``--keep``.

Targets at 10,000 goals: median < 100 ms, < 1.25x the import floor, 10,000/10 ratio < 1.2.
It also prints how many SQL statements one should-run of the measured goal makes (counted
in-process with SQLite's trace callback; BEGIN and COMMIT included), with the installed plugins
and with none.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from timing import child_env, floors, measure, print_table, scratch_dir

AGENT = "bench-agent"


def fill(url: str, n: int) -> str:
    """Create ``n`` goals through the Python API; return the id of the one in the middle, with an open run."""
    from loopx.domain import actions, todos
    from loopx.views import quota
    from loopx.domain import goals as project_prompt
    from loopx.views.should_run import should_run
    from loopx.ledger.registry import Registry

    middle = None
    from loopx.values.progress import counted

    with Registry.open(url) as reg:
        for i in counted(range(n), n, f"filling {n:,} goals"):  # a bar on a terminal only
            g = project_prompt.create(reg, "user", title=f"goal {i}", description="benchmark goal",
                                      criteria=["a criterion"])["id"]
            quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 100, "max_tokens": 10**6})
            first = todos.add(reg, "user", goal_id=g, text="load the data")["id"]
            todos.add(reg, "user", goal_id=g, text="fit the model", depends_on=[first])
            todos.add(reg, "user", goal_id=g, text="write the report", priority="P3")
            actions.add(reg, "user", goal_id=g, name="test", argv=["pytest", "-q"])
            actions.add(reg, "user", goal_id=g, name="lint", argv=["ruff", "check", "."])
            if i == n // 2:
                middle = g
        out = should_run(reg, "user", goal_id=middle, agent=AGENT)
        assert out["decision"] == "run", out
    return middle


def statements(url: str, goal_id: str, *, plugins: bool) -> int:
    """SQL statements one ``quota should-run`` of ``goal_id`` makes (in a child process, so that
    the plugin choice is its own)."""
    import subprocess

    code = ("import sys\n"
            "from loopx.views.should_run import should_run\n"
            "from loopx.ledger.registry import Registry\n"
            "with Registry.open(sys.argv[1]) as reg:\n"
            "    seen = []\n"
            "    reg.store._conn.set_trace_callback(seen.append)\n"
            "    should_run(reg, 'user', goal_id=sys.argv[2], agent=sys.argv[3])\n"
            "    reg.store._conn.set_trace_callback(None)\n"
            "print(len(seen))\n")
    env = child_env(**({} if plugins else {"LOOPX_PLUGINS": "none"}))
    out = subprocess.run([sys.executable, "-c", code, url, goal_id, AGENT], env=env, capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the filled registries (their directory is printed)")
    args = parser.parse_args()
    with scratch_dir("should-run", keep=args.keep) as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    """Fill the registries in ``tmp`` and time should-run on them."""
    py = sys.executable
    base = child_env(LOOPX_AGENT=AGENT)
    cases = floors(base)
    fills = {}
    for n in (args.small, args.goals):
        url = os.path.join(tmp, f"registry-{n}.db")
        started = time.perf_counter()
        goal_id = fill(url, n)
        fills[n] = time.perf_counter() - started
        if n == args.goals:
            # The core's lightest command on the same registry: what any LoopX command costs.
            cases[f"project_prompt show @ {n}"] = (
                [py, "-m", "loopx", "project_prompt", "show", "--goal-id", goal_id],
                {**base, "LOOPX_REGISTRY": url},
            )
        cases[f"should-run @ {n} goals"] = (
            [py, "-m", "loopx", "--format", "json", "quota", "should-run", "--goal-id", goal_id],
            {**base, "LOOPX_REGISTRY": url},
        )
    counted = {f"with the installed plugins": statements(url, goal_id, plugins=True),
               "core only": statements(url, goal_id, plugins=False)}
    medians = measure(cases, args.runs)
    floor = medians["import floor"]
    print(f"registries: {args.small} goals (filled in {fills[args.small]:.1f} s), {args.goals} goals "
          f"(filled in {fills[args.goals]:.1f} s); {args.runs} runs per case, median wall time of a whole process")
    print_table(medians)
    big = medians[f"should-run @ {args.goals} goals"]
    small = medians[f"should-run @ {args.small} goals"]
    ratio = big / small
    print(f"{args.goals}/{args.small} ratio: {ratio:.2f}")
    print("SQL statements per should-run: " + ", ".join(f"{n} ({k})" for k, n in counted.items()))
    print(f"targets at {args.goals} goals: < 100 ms ({'met' if big < 100 else 'MISSED'}), "
          f"< 1.25x import floor ({'met' if big / floor < 1.25 else 'MISSED'}), "
          f"ratio < 1.2 ({'met' if ratio < 1.2 else 'MISSED'})")


if __name__ == "__main__":
    main()

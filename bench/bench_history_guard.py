"""Benchmark: should-run on a goal with 1,000,000 events against a fresh goal (issue 39).

Not a test. Issue 39 made should-run read, in the statement it already sends for the goal's head,
the goal's count of changed events, every trigger definition and their keyed mark
(loopx/ledger/history_guard.py); its cost must stay flat in history: <= 1.1x on a goal with a million
events against a fresh goal.

Building a million events through the API takes this machine over an hour (bench_history.py
builds whole turns, about 200 events/s under load), so the long goal gets a few whole turns
through the API and then ``--events`` more appended by SQL: copies of those turns' own
``evidence.added`` events, each chained with the registry's key exactly as LoopX chains (this
process is the user, key and all), then the head sealed and the goal's revision moved by LoopX's
own seal. The state tables are not replayed for the copies (``self-repair check`` would report the
ledger drift); should-run reads none of that, which is the point: what grows is the events table,
its index, and the goal's sequence numbers. Every timed should-run must answer ``run``
(``ready_work``).

Then, interleaved, medians of ``--runs`` samples: should-run that opens a run, in-process (the run
finished untimed after each sample), and as a whole ``python -m loopx`` process; with the ratio.

Usage:  python bench/bench_history_guard.py [--events 1000000] [--runs 15] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from timing import child_env, scratch_dir

AGENT = "bench-agent"


def new_goal(reg, title: str) -> str:
    from loopx.views import quota
    from loopx.domain import todos
    from loopx.domain import goals as project_prompt

    g = project_prompt.create(reg, "user", title=title, criteria=["it works"])["id"]
    quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 10**8, "max_tokens": 10**14})
    for t in ("first step", "second step", "third step"):
        todos.add(reg, "user", goal_id=g, text=t)
    return g


def a_turn(reg, goal_id: str, i: int) -> None:
    from loopx.domain import evidence, runs
    from loopx.views.should_run import should_run

    out = should_run(reg, "user", goal_id=goal_id, agent=AGENT)
    assert out["decision"] == "run", out
    run = out["interaction_contract"]["run_id"]
    evidence.record(reg, "executor", run_id=run, kind="note", summary=f"turn {i}: read the failing test", agent=AGENT)
    runs.finish(reg, "executor", run_id=run, tokens=1000, cost=0.01, handoff=f"turn {i} done", agent=AGENT)


def append_events(reg, goal_id: str, n: int, log=print) -> float:
    """Append ``n`` copies of the goal's ``evidence.added`` events, keyed and chained; seal."""
    from loopx.ledger import integrity

    started = time.perf_counter()

    def work(tx):
        ring = integrity.keyring(tx)
        models = tx.query("SELECT at, actor, kind, body FROM events WHERE goal_id = ? AND kind = 'evidence.added'"
                          " ORDER BY seq", (goal_id,))
        last = integrity.last_event(tx, goal_id)
        seq, prev = last["seq"], last["hash"]
        rows = []
        for i in range(n):
            m = models[i % len(models)]
            seq += 1
            h = integrity.event_hash(prev, goal_id, seq, m["at"], m["actor"], m["kind"], m["body"], None, ring)
            rows.append((goal_id, seq, m["at"], m["actor"], m["kind"], m["body"], None, prev, h))
            prev = h
            if len(rows) == 50_000 or i == n - 1:
                tx.executemany("INSERT INTO events (goal_id, seq, at, actor, kind, body, operation_id, prev_hash, hash)"
                               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
                rows = []
                log(f"  {i + 1:,} events appended ({(i + 1) / (time.perf_counter() - started):,.0f}/s)")
        tx.execute("UPDATE goals SET revision = ? WHERE id = ?", (seq, goal_id))
        integrity.seal(tx, goal_id, last={"seq": seq, "hash": prev})

    reg.store.write(work)
    return time.perf_counter() - started


def ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def in_process(reg, goals: dict, runs: int) -> dict:
    from loopx.domain import runs as runs_mod
    from loopx.views.should_run import should_run

    out = {k: [] for k in goals}
    for _ in range(runs + 1):  # the first round warms up
        for name, g in goals.items():
            box = {}
            out[name].append(ms(lambda: box.update(should_run(reg, "user", goal_id=g, agent="timed"))))
            assert box["decision"] == "run" and box["reasons"] == ["ready_work"], box
            runs_mod.finish(reg, "user", run_id=box["interaction_contract"]["run_id"], outcome="ok")
    return {k: statistics.median(v[1:]) for k, v in out.items()}


def processes(url: str, reg, goals: dict, runs: int) -> dict:
    from loopx.domain import runs as runs_mod

    env = child_env(LOOPX_REGISTRY=url)
    out = {k: [] for k in goals}
    for _ in range(runs + 1):
        for name, g in goals.items():
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "quota", "should-run", "--goal-id", g,
                                "--agent", "timed-cli"], env=env, capture_output=True, text=True)
            out[name].append((time.perf_counter() - t) * 1000)
            doc = json.loads(p.stdout)
            assert doc["decision"] == "run" and doc["reasons"] == ["ready_work"], doc
            runs_mod.finish(reg, "user", run_id=doc["interaction_contract"]["run_id"], outcome="ok")
    return {k: statistics.median(v[1:]) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    with scratch_dir("history-guard", keep=args.keep) as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    os.environ.setdefault("XDG_CONFIG_HOME", os.path.join(tmp, "config"))  # the key, beside the registry
    from loopx.ledger.registry import Registry

    url = os.path.join(tmp, "registry.db")
    with Registry.open(url) as reg:
        fresh, long = new_goal(reg, "fresh goal"), new_goal(reg, "long history")
        for i in range(5):
            a_turn(reg, long, i)
        took = append_events(reg, long, args.events)
        with reg.read() as tx:
            size = tx.one("SELECT max(seq) AS n FROM events WHERE goal_id = ?", (long,))["n"]
        goals = {"fresh": fresh, "long": long}
        inproc = in_process(reg, goals, args.runs)
        cli = processes(url, reg, goals, max(5, args.runs // 3))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{size:,} events on the long goal ({args.events:,} appended by SQL in {took:.0f} s, keyed and chained);"
          f" medians of {args.runs} samples in-process, {max(5, args.runs // 3)} as processes, interleaved;"
          f" run at {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, machine load {load} at the end.\n")
    print("| should-run that opens a run | fresh goal | long goal | long / fresh |")
    print("|---|---:|---:|---:|")
    for name, found in (("in-process", inproc), ("whole CLI process", cli)):
        ratio = found["long"] / found["fresh"]
        print(f"| {name} | {found['fresh']:.2f} ms | {found['long']:.2f} ms | {ratio:.2f}x"
              f" ({'met' if ratio <= 1.1 else 'MISSED'}: <= 1.1x) |")


if __name__ == "__main__":
    main()

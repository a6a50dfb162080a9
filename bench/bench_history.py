"""Benchmark: a turn on a goal with a long history against the same turn on a fresh goal (issue 25).

Not a test. Builds, in one SQLite registry, a goal with ``--events`` ledger events (default
100,000) through the Python API - whole agent turns: should-run, claim, two pieces of evidence,
todo done, the next todo added, run finish (7 events) - and a goal with ``--todos`` open todos
(default 100,000) beside one with 10. The build is the real code path: every event written by
the same domain functions a command calls, so the bytes are the CLI's; what the bulk build skips
is only the per-command transaction (turns are committed ``--batch`` at a time) and the state
digest of each write, sealed once at the end instead (what the last write seals). ``self-repair
check`` then runs on the result (chain, head, digest and replay must all agree), and every timed
should-run must answer ``run`` (``ready_work``), the decision a real goal gets.

Then, in this one process, interleaved and as medians of ``--runs`` samples:

* should-run that opens a run, in-process, long history vs fresh goal (the run is finished,
  untimed, after each sample), and ``evidence add`` likewise; with the state digest as it is, and
  with the digest left out (to show what the rest costs while loopx/ledger/integrity.py is replaced);
* the same as whole CLI processes (``python -m loopx``);
* should-run over MCP (``loopx mcp``, round trip from an SDK client, the agent's open run handed
  back), p50 / p99 on both goals;
* 100,000-todo vs 10-todo goal should-run, in-process (with and without the digest);
* build rate through the API: events/s of whole turns on the fresh goal and on the long one,
  one transaction per call as the CLI commits (digest included), and of the bulk build.

Usage:  python bench/bench_history.py [--events 100000] [--todos 100000] [--runs 15] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

from timing import child_env, scratch_dir

AGENT = "bench"
EVENTS_PER_TURN = 7


@contextlib.contextmanager
def digest_deferred(reg=None, goals=()):
    """Writes skip the state digest (verify before, seal after); ``goals`` are sealed at the end
    (what their last write would have sealed)."""
    from loopx.ledger import integrity

    verify, seal = integrity.verify_head, integrity.seal
    integrity.verify_head = lambda tx, goal_id, **kw: []
    integrity.seal = lambda tx, goal_id, **kw: None
    try:
        yield
    finally:
        integrity.verify_head, integrity.seal = verify, seal
    for g in goals:
        reg.store.write(lambda tx, g=g: integrity.seal(tx, g))


class _Outer:
    """A store whose every write and read runs inside one outer transaction (the bulk build)."""

    def __init__(self, store, tx):
        self._store, self._tx = store, tx
        self.dialect, self.url, self.readonly = store.dialect, store.url, False

    def write(self, work):
        return work(self._tx)

    @contextlib.contextmanager
    def read(self):
        yield self._tx

    def __getattr__(self, name):
        return getattr(self._store, name)


def turn(reg, goal_id: str, i: int) -> None:
    """One whole agent turn through the API: 7 events."""
    from loopx.domain import evidence, runs, todos
    from loopx.views.should_run import should_run

    out = should_run(reg, "user", goal_id=goal_id, agent=AGENT)
    assert out["decision"] == "run" and out["reasons"] == ["ready_work"], out
    c = out["interaction_contract"]
    run, todo = c["run_id"], c["agent_channel"]["ready_todos"][0]["id"]
    todos.claim(reg, "executor", goal_id=goal_id, todo_id=todo, agent=AGENT, run_id=run)
    evidence.record(reg, "executor", run_id=run, kind="note", summary=f"turn {i}: read the failing test", agent=AGENT)
    evidence.record(reg, "executor", run_id=run, kind="metric", summary=f"turn {i}: score", agent=AGENT,
                    data={"turn": i, "score": i % 7})
    todos.settle(reg, "executor", "done", goal_id=goal_id, todo_id=todo, run_id=run, agent=AGENT)
    todos.add(reg, "executor", goal_id=goal_id, text=f"step {i + 1}", run_id=run)
    runs.finish(reg, "executor", run_id=run, tokens=1000, cost=0.01, handoff=f"turn {i} done", agent=AGENT)


def new_goal(reg, title: str, todo_texts=("first step", "second step")) -> str:
    from loopx.views import quota
    from loopx.domain import todos
    from loopx.domain import goals as project_prompt

    g = project_prompt.create(reg, "user", title=title, criteria=["it works"])["id"]
    quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 10**8, "max_tokens": 10**14})
    for t in todo_texts:
        todos.add(reg, "user", goal_id=g, text=t)
    return g


def bulk_turns(reg, goal_id: str, turns: int, batch: int, start: int = 0, log=print) -> float:
    """``turns`` turns, ``batch`` per transaction, digest deferred then sealed; returns seconds."""
    from loopx.ledger import integrity
    from loopx.ledger.registry import Registry

    started = time.perf_counter()
    with digest_deferred():
        done = 0
        while done < turns:
            n = min(batch, turns - done)

            def work(tx, first=start + done, n=n):
                inner = Registry(_Outer(reg.store, tx))
                for i in range(first, first + n):
                    turn(inner, goal_id, i)

            reg.store.write(work)
            done += n
            if done % (batch * 10) == 0:
                log(f"  {done * EVENTS_PER_TURN:,} events ({done * EVENTS_PER_TURN / (time.perf_counter() - started):,.0f}/s)")
    reg.store.write(lambda tx: integrity.seal(tx, goal_id))
    return time.perf_counter() - started


def bulk_todos(reg, goal_id: str, n: int) -> None:
    from loopx import api
    from loopx.ledger import integrity

    with digest_deferred():
        reg.mutate("user", lambda w: [api.todos.add_in(w, text=f"todo {i}") for i in range(n)], goal_id=goal_id)
    reg.store.write(lambda tx: integrity.seal(tx, goal_id))


def revision(reg, goal_id: str) -> int:
    with reg.read() as tx:
        return tx.one("SELECT revision FROM goals WHERE id = ?", (goal_id,))["revision"]


def ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def should_run_samples(reg, goals: dict, runs: int, *, digest: bool) -> dict:
    """Median ms of a should-run that opens a run, per goal, interleaved; each run finished untimed."""
    from loopx.domain import runs as runs_mod
    from loopx.views.should_run import should_run

    out = {k: [] for k in goals}
    ctx = contextlib.nullcontext() if digest else digest_deferred(reg, goals.values())
    with ctx:
        for _ in range(runs + 1):  # the first round warms up
            for name, g in goals.items():
                box = {}
                t = ms(lambda: box.update(should_run(reg, "user", goal_id=g, agent="timed")))
                assert box["decision"] == "run" and box["reasons"] == ["ready_work"], box
                out[name].append(t)
                runs_mod.finish(reg, "user", run_id=box["interaction_contract"]["run_id"], outcome="ok")
    return {k: statistics.median(v[1:]) for k, v in out.items()}


def evidence_samples(reg, goals: dict, runs: int, *, digest: bool) -> dict:
    from loopx.domain import evidence

    out = {k: [] for k in goals}
    ctx = contextlib.nullcontext() if digest else digest_deferred(reg, goals.values())
    with ctx:
        for _ in range(runs + 1):
            for name, g in goals.items():
                out[name].append(ms(lambda: evidence.record(reg, "user", goal_id=g, kind="note", summary="timed")))
    return {k: statistics.median(v[1:]) for k, v in out.items()}


def cli_samples(url: str, reg, goals: dict, runs: int) -> dict:
    """Median ms of whole ``python -m loopx`` processes: should-run (opening a run) and evidence add."""
    from loopx.domain import runs as runs_mod

    env = child_env(LOOPX_REGISTRY=url)
    py = [sys.executable, "-m", "loopx", "--format", "json"]
    out: dict = {}
    for _ in range(runs + 1):
        for name, g in goals.items():
            t = time.perf_counter()
            p = subprocess.run([*py, "quota", "should-run", "--goal-id", g, "--agent", "timed-cli"], env=env,
                               capture_output=True, text=True)
            took = (time.perf_counter() - t) * 1000
            doc = json.loads(p.stdout)
            assert doc["decision"] == "run" and doc["reasons"] == ["ready_work"], doc
            out.setdefault(("should-run", name), []).append(took)
            runs_mod.finish(reg, "user", run_id=doc["interaction_contract"]["run_id"], outcome="ok")
            t = time.perf_counter()
            p = subprocess.run([*py, "evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "cli"], env=env,
                               capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            out.setdefault(("evidence add", name), []).append((time.perf_counter() - t) * 1000)
    return {k: statistics.median(v[1:]) for k, v in out.items()}


def mcp_samples(url: str, reg, goals: dict, calls: int) -> dict:
    """p50 / p99 ms of should_run over MCP (``loopx mcp`` per goal, an SDK client each), the two
    goals' calls interleaved so both see the same machine load."""
    import anyio

    from loopx.views.should_run import should_run

    for g in goals.values():
        held = should_run(reg, "user", goal_id=g, agent=AGENT)  # the agent's open run, handed back
        assert held["decision"] == "run", held
    samples = anyio.run(_interleaved_mcp, url, goals, calls)
    out = {}
    for name, got in samples.items():
        ordered = sorted(got)
        out[name] = (statistics.median(got), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))])
    return out


async def _interleaved_mcp(url: str, goals: dict, calls: int) -> dict:
    from contextlib import AsyncExitStack

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    out: dict = {name: [] for name in goals}
    async with AsyncExitStack() as stack:
        sessions = {}
        for name in goals:
            params = StdioServerParameters(command=sys.executable, args=["-m", "loopx", "mcp"],
                                           env=child_env(LOOPX_REGISTRY=url))
            read, write = await stack.enter_async_context(stdio_client(params))
            sessions[name] = await stack.enter_async_context(ClientSession(read, write))
            await sessions[name].initialize()
        for i in range(calls + 20):  # the first 20 rounds warm up
            for name, g in goals.items():
                start = time.perf_counter()
                result = await sessions[name].call_tool("should_run", {"goal_id": g, "agent": AGENT})
                took = (time.perf_counter() - start) * 1000
                assert not result.is_error, result
                if i >= 20:
                    out[name].append(took)
    return out


def api_rate(reg, goal_id: str, turns: int, start: int) -> float:
    """Events/s of whole turns through the API, one transaction per call (as the CLI commits)."""
    t = time.perf_counter()
    for i in range(start, start + turns):
        turn(reg, goal_id, i)
    return turns * EVENTS_PER_TURN / (time.perf_counter() - t)


def self_repair_check(url: str, goal_id: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "loopx", "self-repair", "check", "--goal-id", goal_id, "--json"],
                       env=child_env(LOOPX_REGISTRY=url), capture_output=True, text=True)
    return json.loads(p.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--todos", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300, help="MCP calls per goal")
    parser.add_argument("--batch", type=int, default=500, help="turns per transaction in the bulk build")
    parser.add_argument("--probe-turns", type=int, default=60, help="turns timed one transaction per call")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--write-doc", action="store_true", help="put the table into docs/performance.md")
    args = parser.parse_args()
    with scratch_dir("history", keep=args.keep) as tmp:
        run(args, tmp)


def run(args, tmp: str) -> None:
    from loopx.ledger.registry import Registry

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    url = os.path.join(tmp, "registry.db")
    rows = []
    with Registry.open(url) as reg:
        fresh = new_goal(reg, "fresh goal")
        long = new_goal(reg, "long history")
        turns = max(1, (args.events - revision(reg, long)) // EVENTS_PER_TURN)
        log(f"building {turns * EVENTS_PER_TURN:,} events of whole turns...")
        cpu = time.process_time()
        secs = bulk_turns(reg, long, turns, args.batch, log=log)
        cpu = time.process_time() - cpu
        built = revision(reg, long)
        # Also per CPU-second: on a machine shared with other work the wall rate is mostly the load.
        rows.append(("bulk build through the API (batched, digest sealed once)", f"{built:,} events in {secs:.0f} s",
                     f"{built / secs:,.0f} events/s ({built / cpu:,.0f} per CPU-second)"))
        few = new_goal(reg, "10 todos", todo_texts=[f"todo {i}" for i in range(10)])
        many = new_goal(reg, "many todos", todo_texts=())
        log(f"adding {args.todos:,} todos...")
        bulk_todos(reg, many, args.todos)
        log("self-repair check of the built goals...")
        for g in (long, many):
            report = self_repair_check(url, g)
            assert report.get("ok") and not report.get("findings"), report
        rows.append(("self-repair check on the built goals", "ok: chain, head, digest, replay", ""))

        pair = {"fresh": fresh, "long": long}
        for digest in (True, False):
            tag = "" if digest else ", digest left out"
            log(f"in-process should-run / evidence add{tag}...")
            sr = should_run_samples(reg, pair, args.runs, digest=digest)
            rows.append((f"should-run (opens a run), in-process{tag}", f"{sr['fresh']:.2f} / {sr['long']:.2f} ms",
                         f"{sr['long'] / sr['fresh']:.2f}x"))
            ev = evidence_samples(reg, pair, args.runs, digest=digest)
            rows.append((f"evidence add, in-process{tag}", f"{ev['fresh']:.2f} / {ev['long']:.2f} ms",
                         f"{ev['long'] / ev['fresh']:.2f}x"))
            todo_pair = {"fresh": few, "long": many}
            td = should_run_samples(reg, todo_pair, args.runs, digest=digest)
            rows.append((f"should-run, {args.todos:,}-todo vs 10-todo goal{tag}", f"{td['fresh']:.2f} / {td['long']:.2f} ms",
                         f"{td['long'] / td['fresh']:.2f}x"))
        log("CLI processes...")
        cli = cli_samples(url, reg, pair, max(5, args.runs // 2))
        for what in ("should-run", "evidence add"):
            a, b = cli[(what, "fresh")], cli[(what, "long")]
            rows.append((f"{what}, CLI process", f"{a:.1f} / {b:.1f} ms", f"{b / a:.2f}x"))
        log("MCP...")
        mcp = mcp_samples(url, reg, pair, args.calls)
        rows.append(("should-run over MCP, p50 (p99)", f"{mcp['fresh'][0]:.2f} ({mcp['fresh'][1]:.2f}) / "
                     f"{mcp['long'][0]:.2f} ({mcp['long'][1]:.2f}) ms", f"{mcp['long'][0] / mcp['fresh'][0]:.2f}x"))
        log("build rate, one transaction per call...")
        from loopx.domain import runs as runs_mod
        from loopx.views.should_run import should_run

        for g in (fresh, long):  # the agent's open runs from the MCP round go first
            held = should_run(reg, "user", goal_id=g, agent=AGENT)["interaction_contract"]["run_id"]
            runs_mod.finish(reg, "user", run_id=held, outcome="ok")
        start = turns + 10
        r_fresh = api_rate(reg, fresh, args.probe_turns, start)
        r_long = api_rate(reg, long, args.probe_turns, start)
        rows.append(("build rate, one transaction per call (digest included)", f"{r_fresh:,.0f} / {r_long:,.0f} events/s",
                     f"{r_fresh / r_long:.2f}x slower"))
        with digest_deferred(reg, (fresh, long)):
            d_fresh = api_rate(reg, fresh, args.probe_turns, start + args.probe_turns)
            d_long = api_rate(reg, long, args.probe_turns, start + args.probe_turns)
        rows.append(("build rate, one transaction per call, digest left out", f"{d_fresh:,.0f} / {d_long:,.0f} events/s",
                     f"{d_fresh / d_long:.2f}x slower"))
    lines = [f"{built:,} events on the long goal ({turns:,} turns), {args.todos:,} todos on the other; medians of"
             f" {args.runs} samples (CLI {max(5, args.runs // 2)}), interleaved, in one process; run at"
             f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, machine load"
             f" {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end.",
             "", "| measurement | fresh / long (or 10 / many todos) | ratio |", "|---|---:|---:|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]} |" for r in rows]
    print("\n".join(lines))
    if args.write_doc:
        write_doc(lines)


START, END = "<!-- bench_history:start -->", "<!-- bench_history:end -->"

EXPLAINED = """
**What a turn reads, whatever the goal has done** (issue 25). Usage is kept in counters
(`goal_usage`, moved by the run events: `loopx/ledger/usage_counts.py`), not summed over runs; the
ready set is an index kept by the todo events (`todo_deps`, `todo_ready`: `loopx/ledger/todo_ready.py`)
read a page at a time (the first 5 past gated todos and others' live claims); the newest runs,
the latest hand-off and the feedback are index ranges with `LIMIT`; `todo claim` reads the one
todo's dependencies; the attention summary reads its inputs in one statement.

**The state digest costs the rows a write changed** (`loopx/ledger/state_macs.py`, schema 9; see
docs/architecture.md). A keyed MAC per state row, summed: a write takes the rows it changed out
of the trigger-kept change log and updates the sum (three statements), and should-run verifies
the rows its decision reads against their MACs in one statement, beside the head, the newest
events and an empty change log in another. A should-run that opens a run makes 24 statements
on SQLite and 25 on PostgreSQL, none twice, counting the registry's open, the statements its
triggers run and the rollback anchor's (transaction control and PRAGMAs aside;
`tests/test_statement_count.py`, issue 39). The rows "digest left out" skip it (verify and
seal), to show what it costs.

**Open runs are read by (goal, status).** SQLite chose the `(goal_id, opened_at, id)` index for
`... WHERE goal_id = ? AND status = 'open' ORDER BY opened_at, id` (it satisfies the order) and
walked every run of the goal: 4 ms per read at 3,000 turns, read twice per should-run. The open
run reads now order by an expression, so the `(goal_id, status)` index is used.

**The head window checked its oldest event through the link walk.** `verify_head` re-hashes the
newest events; the oldest of them went through the function that links events to their
predecessors, which built the set of every sequence number before it - 5-20 ms per write at
100,000 events, most of what `evidence add` cost on a long goal. It is now checked by its hash.

**What a write costs** (issue 25). A turn's contract hooks ran each implementation on a thread
started for the call, to keep its deadline; they now run on reused worker threads (an idle pool;
a worker whose hook overruns is abandoned with it, the hook named and skipped as before, a veto
failing closed: `loopx/seam/hooks.py`, `tests/test_hook_workers.py`). An SQLite writer moves the
rollback anchor right after its commit while it still holds the writers' queue, and writers
that do meet on the anchor take turns on a `flock` instead of SQLite's polling busy handler
(`loopx/ledger/anchor.py`). One `Keyring` per registry and key per process (not one per transaction),
the newest events' hashes remembered (every write re-hashes the window this process just wrote;
only identical inputs hit), the registry path resolved once per process, and
`jsonsafe.problem` (every event body, a should-run's whole contract) checks plain values where
it meets them. Alternated with main on a small goal (2026-12-02 05:30 UTC, load 2-4): a should-run
that opens a run, in-process, p50 4.1-7.6 ms before (2.3-3.7 ms of it CPU: the rest was waiting
for a new thread) and 1.5-2.8 ms after; whole turns one transaction per call 510-740 events/s
before, 740-940 after (the table's 586 / 543, against 284 / 309 in the run before this one at
load ~6). Under 8 writers (`bench/writers_at.py 10000`, main
and this code alternated three times each, 2026-12-02 05:24 UTC, load 4.8-7.0) the anchor write's
p99 went from 6.6-23.2 ms to 1.8-4.2 ms and a write's own p99 from 17.5-29.4 ms to 14.2-17.5 ms
(own p50 1.2-1.6 ms both); p99 latency 40.7-101.6 ms before, 44.2-54.9 ms after, nothing lost.

**What a write costs, counted in instructions** (issue 25, the session after). Counted with
`valgrind --tool=callgrind` on a loop of whole turns as this bench drives them (the count for 50
turns less the count for 10, per event; hook implementations inline for the count, since the
worker thread's GIL waits vary with load), which the other work on the machine does not move. A
write's cost is spread thin - SQLite about a quarter, JSON encoding about a seventh,
function-level imports of LoopX's own modules (importlib's Python-level `_handle_fromlist`) a
twentieth, the rest over the domain code - so it was cut in many places, none changing a byte
written: `json.dumps` built an encoder per call (the event body, the event's hash input, the
contract column, fingerprints and digest tags now go through C encoders made once,
`jsonsafe.canonical` and its siblings, the same text); the digest tag this process sealed and the
row MACs it computed are remembered, like event hashes (only identical inputs hit: an edited
digest or row is still caught); `todo claim` and `todo done` use the goal row the writer locked
instead of reading it again; the key's path, the step journal check (one `scandir`), capability
declarations (keyed on a plugin-manager generation), a contract's do-steps (parsed once per text)
and clock stamps (`isoformat`) cost less; the modules every write uses are imported once. Per
event, main (c9b4b99) against this code: one transaction per call 3,120,172 -> 2,665,753
instructions (-15 %), the batched build 1,711,365 -> 1,598,160 (-7 %); statements per event
(batched) 14.0 -> 13.7. What is left has no large part: SQLite's own work, the per-transaction
envelope (lock, verify, seal, anchor, commit), and each event's JSON and hashes.

**Fewer statements and transactions per turn** (issue 25, the round after). Traced with an
SQLite trace callback, a whole turn sent 150 statements in the batched build (triggers
included) and 189 in 12 transactions one transaction per call; now 137, and 177 in 9. The
self-repair capability's veto (before every should-run) ran LoopX's cheap damage detectors as
four statements, plus one per pending gate on a todo: `loopx.domain.damage.cheap` now asks whether any
of them would find something in one statement, and runs them only when it says so. `evidence
add` and `run finish` opened a read transaction only to find the run's goal: `Registry.mutate`
takes `goal_of(tx)`, which on SQLite reads the run inside the write (which holds the database
from `BEGIN IMMEDIATE`) and hands the row on to the work; on PostgreSQL, whose repeatable-read
snapshot that read would fix before the goal's row lock, it is still read apart. A writer without
`verify_head`'s reading numbers its first event from the newest event and the recorded head in
one statement, not two. A run's ~1.9 KB contract was encoded for its `run.opened` event and again
for its own column: the column is now cut from the event body's canonical text (exact by
construction, `ledger.member_text`). The plugin manager's environment check (~15 times a turn)
and the run-identity check of every write read `os.environ`'s own mapping instead of
`os.environ.get`. Instructions per event (callgrind as above, modules compiled beforehand:
counts of this loop varied by ~10 % when one of the two runs compiled them), main 68a8278
against this code: batched build 1,585,244-1,592,775 -> 1,468,382-1,471,160 (-7.5 %), one
transaction per call 2,645,754 -> 2,524,551 (-4.6 %). Hook implementations on worker threads
(as this bench runs them) count the same as inline (1,470,977): the ~22 µs hand-off per hook
call is waiting, not CPU, so running known-fast hooks inline would not lower events per
CPU-second; it was left alone (a hung hook must still not hang the write).

**Noise, and what is still short.** On this 2-core machine shared with other work (load 4-10)
the ratios move by about ±0.3x between runs, and wall-clock rates by 2-3x: the bulk build row
also gives events per CPU-second, what the code costs whatever the load. The table's run (08:56
UTC, load 1.5 at the start, 2.0 at the end) built at 2,297 events/s, 2,438 per CPU-second; a run
of the same code minutes before (08:48 UTC, load 1.8-2.4) at 1,706 and 1,844 (the session
before: 1,840 and 1,930). Main (68a8278) and this code alternated in separate processes, the
bench's bulk build of 99,995 events (2026-12-02 08:52 UTC, load 2.1-2.4): main 2,367 and 2,284
events per CPU-second, this code 2,707 and 2,541 (+11 to +18 %); 1,000 batched turns 2,282-2,642
on main, 2,722-3,032 here (08:47 UTC, load 1.8). So the 2,000 events/s holds on a quiet machine,
with a margin only per CPU-second. What is left is spread thin over a turn (the counts above):
about 20 SQL statements per event counting triggers - each state row's trigger prints its JSON
for the digest's change log -, the per-transaction envelope, each event's JSON and hashes,
SQLite's own mutexes (serialized mode, ~5 % of the instructions), none of it more than a few per
cent. 8 writers' p99 ≤ 20 ms is the queue: 7 writes of ~1.2 ms ahead, stretched by
CPU contention (8 writing processes on 2 cores at load 5-7), plus the write of every 64th ticket,
which checkpoints the WAL (an fsync, 5-15 ms) after leaving the queue.

**How the long goal is built.** Whole turns through the same API functions the commands call
(should-run, claim, two evidence, done, a new todo, finish: 7 events), committed 500 turns a
transaction with the digest sealed once at the end (what the last write seals), then
`self-repair check` runs on it (chain, head, digest and replay all agree); every timed
should-run is asserted to answer `run` / `ready_work`, the decision a real goal gets.
`bench/fill.py`, the many-goals fill of `bench/run.py`, writes each goal's chain and seals it too.
"""


def write_doc(lines: list[str]) -> None:
    """Put the table between the markers of ``docs/performance.md`` (``bench/run.py`` keeps them)."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
    text = path.read_text()
    block = "\n".join([START, "## A goal's history (`python bench/bench_history.py --write-doc`)", "", *lines, "",
                       *EXPLAINED.strip("\n").splitlines(), END])
    if START in text and END in text:
        text = text[:text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()

"""One-command benchmark: ``python bench/run.py`` measures LoopX from 10 to 1,000,000 goals.

It builds (once) registries of each size with the bulk fill of ``bench/fill.py`` (goals made
through the API, copied in bulk with their chains, digests and heads computed with the
registry's key: what the commands write, checked by ``tests/test_bench_fill.py``), caches them, and writes ``docs/performance.md``: every
figure a median with its p95, beside floors measured in the same run (``python -c pass``, the
import floor, raw SQLite commits per second), on SQLite and on PostgreSQL.

Cache: ``$LOOPX_BENCH_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/loopx-bench/``. A registry is
named by its size, the fill version and the schema version, and is renamed into place only when
complete, so an interrupted fill is never measured (the next run resumes it); ``--clean`` deletes the cache. PostgreSQL
registries are schemas ``loopx_bench_*`` in the database ``--postgres`` names (default
``$LOOPX_BENCH_POSTGRES_URL``, else ``$LOOPX_TEST_POSTGRES_URL``); without one, the run starts a
throwaway server of its own (``tests/pg_server.py``, as the test suite does: its registries are
filled anew and deleted with it), and ``--postgres none`` skips PostgreSQL.

Usage::

    python bench/run.py                       # everything (the 1,000,000 fill takes minutes, once)
    python bench/run.py --sizes 10,10000      # a quick run
    python bench/run.py --fill-only --sizes 1000000   # just build the cache
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from timing import IMPORT_FLOOR, child_env  # noqa: E402

DEFAULT_SIZES = (10, 10_000, 100_000, 1_000_000)
DEFAULT_PG_SIZES = (10, 10_000, 100_000)
LOOPX = [sys.executable, "-m", "loopx"]


# ------------------------------------------------------------------------------ cache


def cache_dir() -> Path:
    """Where filled registries are kept between runs."""
    base = os.environ.get("LOOPX_BENCH_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "loopx-bench"


def _tag(n: int) -> str:
    # Not the schema version: a cached registry is migrated when opened (read-write) by a newer LoopX.
    from fill import FILL_VERSION

    return f"f{FILL_VERSION}_{n}"


def sqlite_registry(n: int, log) -> str:
    """The cached SQLite registry of ``n`` goals, filled first when missing."""
    import fill

    from loopx.ledger.registry import Registry

    path = cache_dir() / f"sqlite_{_tag(n)}.db"
    if path.exists():
        Registry.open(str(path)).close()  # migrates a registry cached by an older LoopX
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")  # an interrupted fill is resumed (batches are transactions)
    log(f"filling {path} with {n:,} goals...")
    started = time.monotonic()
    with Registry.open(str(partial)) as reg:
        fill.fill(reg, n, progress=log if n >= 100_000 else None)
        reg.store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        reg.store._conn.execute("ANALYZE")
    partial.rename(path)
    Path(f"{partial}-lock").unlink(missing_ok=True)  # the writers' queue file of the partial name
    log(f"  filled in {time.monotonic() - started:.0f} s")
    return str(path)


def postgres_registry(base: str, n: int, log) -> str:
    """The cached PostgreSQL registry (a schema) of ``n`` goals, filled first when missing."""
    import fill
    import psycopg

    from loopx.ledger.registry import Registry

    name = f"loopx_bench_{_tag(n)}"
    url = _with_schema(base, name)
    with psycopg.connect(base, autocommit=True) as conn:
        done = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
        if done:
            complete = conn.execute(f"SELECT 1 FROM {name}.meta WHERE key = 'bench_complete'").fetchone()
            if complete:
                Registry.open(url).close()  # migrates a registry cached by an older LoopX
                return url
            conn.execute(f"DROP SCHEMA {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    log(f"filling PostgreSQL schema {name} with {n:,} goals...")
    started = time.monotonic()
    with Registry.open(url) as reg:
        fill.fill(reg, n, progress=log if n >= 100_000 else None)
        reg.store.write(lambda tx: tx.execute("INSERT INTO meta (key, value) VALUES ('bench_complete', '1')"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    log(f"  filled in {time.monotonic() - started:.0f} s")
    return url


def _with_schema(base: str, name: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{name}"


# ------------------------------------------------------------------------------ measuring


def run_once(argv: list[str], env: dict) -> float:
    """Wall ms of one whole process; a failure raises."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return wall


def peak_rss_mb(argv: list[str], env: dict) -> float | None:
    """The process's peak RSS, from GNU time (a child forked from this big process would count
    the parent's pages copied before exec, so ``wait4`` here over-reports)."""
    if not os.path.exists("/usr/bin/time"):
        return None
    with tempfile.NamedTemporaryFile("r", dir=cache_dir(), suffix=".rss") as out:
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out.name, *argv], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return int(out.read().split()[-1]) / 1024


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def _argv(argv) -> list[str]:
    # A case's argv, or a callable that makes the argv of its next call (a fresh goal each call,
    # should_run_case): called before the clock starts.
    return argv() if callable(argv) else argv


def measure(cases: dict, runs: int) -> dict:
    """``{name: {"median", "p95", "rss_mb"}}``, the cases interleaved after one warm-up each."""
    for argv, env in cases.values():
        run_once(_argv(argv), env)
    walls = {name: [] for name in cases}
    for _ in range(runs):
        for name, (argv, env) in cases.items():
            walls[name].append(run_once(_argv(argv), env))
    rss = {name: max((peak_rss_mb(_argv(argv), env) or 0) for _ in range(2)) for name, (argv, env) in cases.items()}
    return {name: {"median": statistics.median(v), "p95": pct(v, 95), "rss_mb": rss[name]}
            for name, v in walls.items()}


def sqlite_commits_per_second(seconds: float = 2.0) -> float:
    """Raw SQLite: single-row INSERT + COMMIT in WAL mode, synchronous NORMAL (LoopX's settings)."""
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        conn = sqlite3.connect(os.path.join(tmp, "raw.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        n, end = 0, time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES ('x')")
            conn.execute("COMMIT")
            n += 1
        rate = n / (time.perf_counter() - start)
        conn.close()
    return rate


def sample_goals(url: str, k: int = 20) -> list[str]:
    """Goals for per-goal commands: the newest ``k`` (they have todos, actions and limits)."""
    from loopx.ledger.registry import Registry

    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        return [r["id"] for r in tx.query("SELECT id FROM goals ORDER BY created_seq DESC LIMIT ?", (k,))]


def assert_real_decision(url: str, goal: str, env: dict) -> None:
    """The should-run the bench times makes the decision a real goal gets: ``run`` (a goal filled
    without its chain, head and digest would answer ``repair``, a different and cheaper path)."""
    p = subprocess.run([*LOOPX, "quota", "should-run", "--goal-id", goal, "--agent", "bench-should-run", "--json"],
                       env={**env, "LOOPX_REGISTRY": url}, capture_output=True, text=True, timeout=120)
    out = json.loads(p.stdout)
    assert out.get("decision") == "run", f"the timed goal answers {out.get('decision')} {out.get('reasons')}, not run"


def cli_cases(url: str, goal: str, env: dict) -> dict:
    """The timed read commands at one registry (should-run: :func:`should_run_case`)."""
    env = {**env, "LOOPX_REGISTRY": url}
    return {
        "status (first page)": ([*LOOPX, "status", "--json"], env),
        "status --goal-id": ([*LOOPX, "status", "--goal-id", goal, "--json"], env),
        "project_prompt list": ([*LOOPX, "project_prompt", "list", "--json"], env),
    }


SHOULD_RUN = "quota should-run (opens a run)"
SHOULD_RUN_NOTE = ("`quota should-run` opens a new run in every timed call: each call is on a goal of its own, made"
                   " (like the filled goals: limits, three todos, two actions) before the clock starts, so no call"
                   " hands back a run a previous call opened. These goals stay in the cached registry"
                   " (runs + 3 of them per size per bench run), made after the other commands were timed.")


def should_run_case(url: str, env: dict, calls: int) -> tuple:
    """``quota should-run`` as a case of :func:`measure` whose every call opens a new run: a fresh
    goal per call (``calls`` of them, made now through the API as ``bench/fill.py`` makes a
    plain goal of its mix), each asked once, checked to decide ``run``."""
    from fill import api_goal
    from loopx.ledger.registry import Registry

    with Registry.open(url) as reg:
        fresh = [api_goal(reg, 2) for _ in range(calls)]  # mix number 2: no turn yet, no gate
    for goal in fresh[:1]:
        assert_real_decision(url, goal, env)  # the first is checked (and used up) here
    left = iter(fresh[1:])

    def argv():
        return [*LOOPX, "quota", "should-run", "--goal-id", next(left), "--agent", "bench-should-run", "--json"]

    return argv, {**env, "LOOPX_REGISTRY": url}


def server_load(url: str, goals: list[str], env: dict, seconds: float, writer: bool) -> dict:
    """``GET /api/status`` and ``GET /api/goals/{id}`` from 8 keep-alive connections in another
    process; with ``writer``, a third process commits a todo every 100 ms meanwhile."""
    env = {**env, "LOOPX_REGISTRY": url}
    server = subprocess.Popen([*LOOPX, "status-server", "--port", "0", "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    write_proc = None
    try:
        base = json.loads(server.stdout.readline())["url"]
        if writer:
            write_proc = subprocess.Popen([sys.executable, str(HERE / "writers.py"), "--tick", url, goals[-1]],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = {}
        for name, paths in (("GET /api/status", ["/api/status"]),
                            ("GET /api/goals/{id}", [f"/api/goals/{g}" for g in goals[:10]])):
            load = subprocess.run([sys.executable, str(HERE / "bench_status.py"), "--client", base, "--threads", "8",
                                   "--seconds", str(seconds), *paths],
                                  capture_output=True, text=True, timeout=seconds + 120, check=True)
            out[name] = json.loads(load.stdout)
        out["server_rss_mb"] = _peak_rss_mb(server.pid)
        return out
    finally:
        if write_proc is not None:
            write_proc.terminate()
            write_proc.wait(timeout=30)
        server.terminate()
        server.wait(timeout=30)


def _peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def writers(url: str, env: dict, processes: int = 8, writes: int = 100, queue: bool = True) -> dict:
    """``processes`` real processes writing at once (see ``bench/writers.py``); plus one alone.

    Each process writes to a goal of its own created for this run, so a run measures goals of
    the same size whatever earlier runs left (a write's state digest costs the rows it changed,
    loopx/ledger/state_macs.py, but the goal's other reads are kept comparable too). Latency is what the caller of
    one write waits: the writers' queue + the transaction + the commit; ``wait`` is the part
    spent queueing, ``own`` the rest.
    """
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(url) as reg:
        goals = [project_prompt.create(reg, "user", title=f"bench writer {k}")["id"] for k in range(processes + 1)]
    env = {**env, "LOOPX_REGISTRY": url}

    def start(mine):
        env["LOOPX_BENCH_START_AT"] = str(time.time() + 2.0 + 0.2 * len(mine))
        return [subprocess.Popen([sys.executable, str(HERE / "writers.py"), url, goal, str(writes)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for goal in mine]

    def collect(procs):
        lat, waits, errors = [], [], 0
        for p in procs:
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                errors += 1
                continue
            data = json.loads(out)
            lat += data["latencies_ms"]
            waits += data["waits_ms"]
            errors += data["errors"]
        return lat, waits, errors

    def todo_count():
        with Registry.open(url, readonly=True) as reg, reg.read() as tx:
            return tx.one("SELECT count(*) AS n FROM todos")["n"]

    alone, alone_waits, _ = collect(start(goals[-1:]))
    before = todo_count()
    lat, waits, errors = collect(start(goals[:processes]))
    lost = processes * (writes + 1) - (todo_count() - before)  # + the untimed warm-up write each
    out = {"alone_p50": statistics.median(alone), "alone_p99": pct(alone, 99),
           "p50": statistics.median(lat), "p95": pct(lat, 95), "p99": pct(lat, 99), "max": max(lat),
           "writes": len(lat), "lost": lost, "errors": errors, "processes": processes}
    if queue:  # PostgreSQL writers wait on row locks inside the server: no split to report
        own = [t - w for t, w in zip(lat, waits)]
        out.update(wait_p50=statistics.median(waits), wait_p99=pct(waits, 99),
                   own_p50=statistics.median(own), own_p99=pct(own, 99))
    return out


# ------------------------------------------------------------------------------ report


def _ms(v) -> str:
    return "-" if v is None else f"{v:.1f}"


#: Marked sections written by other benchmarks, carried over when the report is rewritten.
KEPT_SECTIONS = [("<!-- bench_history:start -->", "<!-- bench_history:end -->"),
                 ("<!-- todos_100k:start -->", "<!-- todos_100k:end -->"),
                 ("<!-- writers_1m:start -->", "<!-- writers_1m:end -->"),
                 ("<!-- issue_fix_verify:start -->", "<!-- issue_fix_verify:end -->")]


def write_report(path: Path, results: dict, notes: list[str]) -> None:
    """``docs/performance.md`` from ``results``."""
    floors = results["floors"]
    f = floors["cases"]
    lines = [
        "# Performance",
        "",
        "Written by `python bench/run.py` (do not edit by hand; re-run it). Every time is a median with its",
        "p95 beside it, over whole `python -m loopx` processes, measured in the same run as the floors.",
        "",
        f"Machine: {results['machine']}. Run at {results['at']}.",
        "",
        "## Floors",
        "",
        "| floor | median ms | p95 ms |",
        "|---|---:|---:|",
        f"| `python -c pass` | {_ms(f['python -c pass']['median'])} | {_ms(f['python -c pass']['p95'])} |",
        f"| import floor (`{IMPORT_FLOOR}`) | {_ms(f['import floor']['median'])} | {_ms(f['import floor']['p95'])} |",
        f"| `python -c \"import psycopg\"` (psycopg {results.get('psycopg', '?')}) | {_ms(f['import psycopg']['median'])} |"
        f" {_ms(f['import psycopg']['p95'])} |",
        f"| import floor + psycopg | {_ms(f['import floor + psycopg']['median'])} |"
        f" {_ms(f['import floor + psycopg']['p95'])} |",
        f"| raw SQLite commits/s (WAL, synchronous NORMAL) | {floors['sqlite_commits_per_s']:,.0f} | |",
        "",
    ]
    for backend, by_size in results["backends"].items():
        if not by_size:
            continue
        pg = backend == "postgres"
        names = ["import floor", "import floor + psycopg"] if pg else ["import floor"]
        lines += [f"## {backend}: commands", "",
                  "Each size's commands ran interleaved with the floors beside them (their medians there), so",
                  "load that came and went during the run hit both alike; `x` = the command's median / that floor."
                  " Peak RSS: GNU time's maximum resident set, largest of two runs.", "",
                  "| goals | command | median ms | p95 ms | import floor ms | x import floor |"
                  + (" floor + psycopg ms | x floor + psycopg |" if pg else "") + " peak RSS MB |",
                  "|---:|---|---:|---:|---:|---:|" + ("---:|---:|" if pg else "") + "---:|"]
        for n, res in by_size.items():
            near = res.get("interleaved_floors") or {}
            if not near and "interleaved_floor" in res:  # an older last-run.json
                near = {names[-1]: res["interleaved_floor"]}
            for name, m in res["cli"].items():
                # A command timed beside floors of its own (should-run) is compared with those.
                floors_here = [((m.get("floors") or near).get(name) or f[name])["median"] for name in names]
                cols = "".join(f" {fl:.1f} | {m['median'] / fl:.2f} |" for fl in floors_here)
                lines.append(f"| {n:,} | {name} | {m['median']:.1f} | {m['p95']:.1f} |{cols}"
                             f" {m['rss_mb']:.1f} |")
        sizes = list(by_size)
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            lines += ["", f"Largest/smallest ({hi:,}/{lo:,} goals) median ratios: " + ", ".join(
                f"{name} {by_size[hi]['cli'][name]['median'] / by_size[lo]['cli'][name]['median']:.2f}"
                for name in by_size[lo]["cli"])]
        lines += ["", f"## {backend}: status server", "",
                  "8 keep-alive connections from another process; `writer` = a third process commits a todo every",
                  "100 ms to one goal during the load.", "",
                  "| goals | load | route | req/s | p50 ms | p99 ms | max ms | errors | server peak RSS MB |",
                  "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
        for n, res in by_size.items():
            for load_name, load in res.get("server", {}).items():
                for route in ("GET /api/status", "GET /api/goals/{id}"):
                    x = load[route]
                    lines.append(f"| {n:,} | {load_name} | `{route}` | {x['requests_per_second']:,.0f} |"
                                 f" {_ms(x['p50_ms'])} | {_ms(x['p99_ms'])} | {_ms(x['max_ms'])} | {x['errors']} |"
                                 f" {_ms(load.get('server_rss_mb'))} |")
        rows = [(n, res["writers"]) for n, res in by_size.items() if res.get("writers")]
        if rows:
            lines += ["", f"## {backend}: concurrent writers", "",
                      "Each process adds todos to a goal of its own (created for the run) through the Python API,",
                      "one transaction each, as fast as it can, after one untimed warm-up write (a process's first",
                      "write loads plugins: start-up, not write latency). Latency = what the caller of one write",
                      "waits (queueing + transaction + commit), measured inside the writer; `wait` = the part spent",
                      "queueing for the writers' lock, `own` = the rest. `alone` = one process by itself.", "",
                      "| goals | processes | writes | alone p50 ms | p50 ms | p95 ms | p99 ms | max ms |"
                      " wait p50 / p99 ms | own p50 / p99 ms | lost | errors |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for n, w in rows:
                split = (f" {w['wait_p50']:.2f} / {w['wait_p99']:.2f} | {w['own_p50']:.2f} / {w['own_p99']:.2f} |"
                         if "wait_p50" in w else " - | - |")
                lines.append(f"| {n:,} | {w['processes']} | {w['writes']} | {w['alone_p50']:.2f} | {w['p50']:.2f} |"
                             f" {w['p95']:.2f} | {w['p99']:.2f} | {w['max']:.1f} |{split} {w['lost']} | {w['errors']} |")
        lines.append("")
    if notes:
        lines += ["## Notes on this run", ""] + [f"- {n}" for n in notes] + [""]
    lines += HOW
    text = "\n".join(lines)
    # Sections other benchmarks write into the same file (bench/bench_history.py) are kept.
    old = path.read_text() if path.exists() else ""
    for start, end in KEPT_SECTIONS:
        if start in old and end in old:
            text = text.rstrip("\n") + "\n\n" + old[old.index(start):old.index(end) + len(end)] + "\n"
    path.write_text(text)


HOW = """## How the figures stay flat

**The overview costs a page.** Every write applies its events through `loopx.ledger.log.apply`,
which also refreshes the goal's row in `goal_summary` (status, creation order, lane: closed /
quiet / attention, the attention codes, the earliest expiry of its open runs) when the event's
area can move it (goal, quota, gate, run, capability events; todo, action, evidence and reward
events cannot). Triggers keep `summary_counts` (goals per status, goals needing attention) equal
to that table, whatever writes it. Replay, registry copy and self-repair rebuild it like every
other goal table; schema migration 3 builds it for older registries with set queries. A page of
`loopx status` / `GET /api/status` is then: the counters, the goals whose open run has expired
by now (an index range on `run_expires`), one index range on `(lane, created_seq)` per part of
the page, and the shown fields of the page's goals only.

*Stored vs. computed at read time:* gate_pending, budget_exhausted (usage counts closed runs
only), run_abandoned (newest run marked abandoned) and run_failed depend only on rows, so they
are stored. The one clock-dependent reason, an open run past its expiry, is judged when the page
is read from the stored `run_expires`. Cadence and todo leases decide whether an agent may run,
not whether a human must look, so they are not attention reasons.

**The status server never recomputes what did not change.** Views are cached by the revision of
what they show (a goal view by that goal's revision; the overview by the registry revision and
change generation), at most 1 s because the clock moves leases and run expiry; concurrent misses
build once (single-flight); encoded views are capped at 32 MiB (`LOOPX_STATUS_CACHE_BYTES`).

**Writers queue first come, first served.** A SQLite writer takes a ticket in
`registry.db-lock` and waits on a one-byte lock held by the writer just ahead of it
(`loopx/store/writer_queue.py`, Linux open-file-description locks; `flock` elsewhere) before
`BEGIN IMMEDIATE`: it is woken the moment that writer finishes, alone, and a process that writes
again at once goes to the back. The earlier plain `flock` let such a process take the lock back
before the woken waiter ran (in `tests/test_scale_writers.py` a writer looping five times got in
five times in a row ahead of two queued writers), and SQLite's busy handler, the fallback, sleeps
up to 100 ms. Readers never queue. A killed writer's locks go with it.

*What a write costs (profiled at 1,000,000 goals):* the queue itself ~0.01 ms, `BEGIN
IMMEDIATE` ~0.01 ms, `COMMIT` ~0.1 ms - but SQLite's automatic WAL checkpoint (page copy +
fsync, 4 ms at p99 and up to 25 ms on this machine) ran inside the commit that crossed 1,000
pages, holding all 7 writers behind it. Queued writers now checkpoint after leaving the queue
(the writer of every 64th ticket, PASSIVE, so it blocks neither readers nor the next writer).
The transaction's own work was ~1.5 ms on a goal of 50 todos, ~85% of it tamper evidence: every
write verifies its goal's state digest before the change and seals a new one after, each hashing
every row of the goal's current state (so a write grows with its goal's todos: ~12 ms at 400).
The digest now hashes plain row tuples and remembers each row's text (keyed by its values and
their types) for the second pass and the process's next writes - byte-for-byte the same digest
(`tests/test_scale_digest.py`); a write alone now costs ~1 ms (p50) on such a goal. Under 8 writers that never pause, each write waits for the 7 ahead
of it: the `wait` column is ~7 × the `own` column, so the p99 target needs a write's own cost
under ~2.5 ms on a loaded 2-core machine. The bench writes to fresh goals each run, after one
untimed warm-up write per process (the first write loads plugins: start-up, measured by the
command table). Earlier runs wrote to the same 8 goals every run (their todos piling up) and
timed each process's first write, whose plugin loading was the p99.

**`status` start-up.** The first page's quota pictures and last runs are flat values turned
into JSON with `attrs.asdict`, not cattrs: importing cattrs and generating its converters was
~30 ms of the ~45 ms `status` spent above the import floor at 1,000,000 goals (the JSON is the
same; `tests/test_scale_startup.py` checks cattrs stays out).

**PostgreSQL start-up: the floor is psycopg's import.** `import psycopg` loads the whole package
whatever a command uses: `psycopg.errors` imports `asyncio` (for `CancelledError`; asyncio brings
`ssl`), `psycopg_binary.version` reads its version through `importlib.metadata`, `psycopg.pq.misc`
imports `ctypes.util`, plus logging, every type adapter and both connection classes; importing a
submodule (`psycopg.pq`) runs the package's `__init__` first, so no smaller part can be imported.
`python -c "import psycopg"` alone (see the floors) costs more than 1.5× the import floor, so
"should-run ≤ 1.5× the import floor" cannot be met with psycopg 3 on this machine; the table
gives each command's ratio to the import floor + psycopg too. LoopX's PostgreSQL store adds no
other import on a command's path (no hashlib / OpenSSL) and a command also pays connecting (and
SCRAM authentication) to the server.

**Cache.** Filled registries live in `${XDG_CACHE_HOME:-~/.cache}/loopx-bench/` (or
`$LOOPX_BENCH_CACHE`) and PostgreSQL schemas `loopx_bench_*` (on a server named by `--postgres`;
without one the run starts a throwaway server and fills it anew); `python bench/run.py --clean`
removes the files. The fill (`bench/fill.py`) makes its first 11 goals through the API and copies
them in bulk (`executemany`, one transaction per 25,000 goals): each copy's rows with its own ids,
title, creation numbers and contract fingerprint, and its event chain, per-row MACs, digest and
head computed with the registry's key - the bytes the commands write (`tests/test_bench_fill.py`
compares them and runs `self-repair check`); the commands measured here write a little to the
cached registries (should-run's goals, a fresh one per call, and the writers' todos).
""".splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="SQLite registry sizes")
    parser.add_argument("--pg-sizes", default=",".join(map(str, DEFAULT_PG_SIZES)), help="PostgreSQL sizes")
    parser.add_argument("--postgres", default=os.environ.get("LOOPX_BENCH_POSTGRES_URL")
                        or os.environ.get("LOOPX_TEST_POSTGRES_URL"), help="PostgreSQL URL (default: env)")
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per server load")
    parser.add_argument("--writes", type=int, default=100, help="writes per writer process")
    parser.add_argument("--fill-only", action="store_true", help="build the cached registries and stop")
    parser.add_argument("--clean", action="store_true", help="delete the cache and stop")
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    parser.add_argument("--note", action="append", default=[], help="a line for the report's notes")
    parser.add_argument("--report-only", action="store_true",
                        help="re-write the report from the cache's last-run.json (no measuring)")
    args = parser.parse_args()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if args.clean:
        shutil.rmtree(cache_dir(), ignore_errors=True)
        log(f"removed {cache_dir()}")
        return
    if args.report_only:
        results = json.loads((cache_dir() / "last-run.json").read_text())
        results["backends"] = {b: {int(n): r for n, r in by.items()} for b, by in results["backends"].items()}
        write_report(Path(args.out), results, results.get("notes", []) + args.note)
        log(f"wrote {args.out}")
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]
    notes = list(args.note)
    server = None
    if args.postgres == "none" or not args.pg_sizes:
        args.postgres = None
        notes.append("PostgreSQL skipped (--postgres none).")
    elif not args.postgres:
        sys.path.insert(0, str(ROOT))
        from tests.pg_server import ThrowawayPostgres

        log("starting a throwaway PostgreSQL server...")
        server = ThrowawayPostgres()
        args.postgres = server.start()
    pg_sizes = [int(s) for s in args.pg_sizes.split(",") if s] if args.postgres else []
    try:
        _run(args, sizes, pg_sizes, notes, log)
    finally:
        if server is not None:
            server.stop()


def _run(args, sizes, pg_sizes, notes, log) -> None:

    urls = {("sqlite", n): sqlite_registry(n, log) for n in sizes}
    for n in pg_sizes:
        urls[("postgres", n)] = postgres_registry(args.postgres, n, log)
    if args.fill_only:
        return

    env = child_env()
    log("floors...")
    floor_cases = {"python -c pass": ([sys.executable, "-c", "pass"], env),
                   "import floor": ([sys.executable, "-c", IMPORT_FLOOR], env),
                   "import psycopg": ([sys.executable, "-c", "import psycopg"], env),
                   "import floor + psycopg": ([sys.executable, "-c", IMPORT_FLOOR + ", psycopg"], env)}
    try:
        from importlib.metadata import version

        psycopg_version = version("psycopg")
    except Exception:  # noqa: BLE001 - only a label in the report
        psycopg_version = "?"
    results = {
        "psycopg": psycopg_version,
        "machine": f"{os.cpu_count()} CPUs, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at start,"
                   f" Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}",
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "floors": {"cases": measure(floor_cases, args.runs), "sqlite_commits_per_s": sqlite_commits_per_second()},
        "backends": {"sqlite": {}, "postgres": {}},
    }
    for (backend, n), url in urls.items():
        log(f"{backend} {n:,} goals: commands...")
        goals = sample_goals(url)
        # The floor a backend's commands are compared with runs interleaved with them (so drift and
        # load hit both alike); the report gives the floors of the run's start.
        near = ["import floor"] + (["import floor + psycopg"] if backend == "postgres" else [])
        res = {"cli": measure({**{k: floor_cases[k] for k in near}, **cli_cases(url, goals[0], env)}, args.runs)}
        res["interleaved_floors"] = {k: res["cli"].pop(k) for k in near}
        # should-run last, beside floors of its own: the goals it needs are made first (see SHOULD_RUN_NOTE).
        log(f"{backend} {n:,} goals: {SHOULD_RUN}, a fresh goal per call...")
        sr = measure({**{k: floor_cases[k] for k in near},
                      SHOULD_RUN: should_run_case(url, env, 1 + 1 + args.runs + 2)}, args.runs)
        res["cli"][SHOULD_RUN] = {**sr[SHOULD_RUN], "floors": {k: sr[k] for k in near}}
        log(f"{backend} {n:,} goals: status server...")
        res["server"] = {"cold": server_load(url, goals, env, args.seconds, writer=False),
                         "writer": server_load(url, goals, env, args.seconds, writer=True)}
        if n == max(s for b, s in urls if b == backend):
            log(f"{backend} {n:,} goals: writers...")
            res["writers"] = writers(url, env, writes=args.writes, queue=backend == "sqlite")
        results["backends"][backend][n] = res
    results["machine"] += f"; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end"
    results["notes"] = [SHOULD_RUN_NOTE, *notes]
    write_report(Path(args.out), results, results["notes"])
    (cache_dir() / "last-run.json").write_text(json.dumps(results, indent=1, default=str))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()

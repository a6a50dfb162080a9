"""Benchmark: the status server under load, and `loopx status --json` at 10,000 goals.

Not a test. Two measurements, both on loopback only and bounded in count and time:

1. ``GET /api/goals/{id}``: requests per second and latency percentiles, from a *second
   process* (this script re-run with ``--client``: threads with keep-alive connections, or
   Debian's ``wrk`` when ``--wrk`` is given and it is installed) against ``loopx status-server``
   running as its own process. Targets: >= 1,000 requests/s with p99 < 20 ms.
2. ``loopx status --json`` (the all-goals view, attention first) median wall time at 10,000
   goals, beside ``python -c pass`` and the import floor measured in the same run, and
   ``loopx status --goal-id G --json``. Target: within 150 ms.

The registry is filled through LoopX's own Python API (goals, limits, gates, todos, and runs
opened by ``quota should-run`` and closed by ``run finish``), so its rows are what real use
writes. Usage::

    python bench/bench_status.py [--goals 10000] [--runs 15] [--seconds 10] [--threads 8]
                                 [--registry PATH (reused when it exists)] [--wrk]

Without ``--registry`` the registry lives in a temp directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from timing import child_env, floors, measure, scratch_dir

MAX_REQUESTS = 200_000  # a hard bound on the load, whatever --seconds says


def fill(url: str, n: int) -> list[str]:
    """``n`` goals of mixed shapes; returns the ids of the busiest goals (for the API load)."""
    from loopx.domain import gates, runs, todos
    from loopx.views import quota
    from loopx.domain import goals as project_prompt
    from loopx.views.should_run import should_run
    from loopx.ledger.registry import Registry

    busy = []
    from loopx.values.progress import counted

    with Registry.open(url) as reg:
        for i in counted(range(n), n, f"filling {n:,} goals"):  # a bar on a terminal only
            goal_id = project_prompt.create(reg, "user", title=f"goal {i}", description="benchmark goal",
                                            criteria=["a criterion"])["id"]
            if i % 10 == 0:  # one in ten has a budget, a plan and two finished turns
                quota.set_limits(reg, "user", goal_id=goal_id, values={"max_turns": 3, "max_tokens": 50_000})
                first = todos.add(reg, "user", goal_id=goal_id, text="first step")["id"]
                todos.add(reg, "user", goal_id=goal_id, text="second step", depends_on=[first])
                for outcome in ("ok", "failed" if i % 30 == 0 else "ok"):
                    contract = should_run(reg, "user", goal_id=goal_id, agent="bench")
                    run_id = contract["interaction_contract"]["run_id"]
                    runs.finish(reg, "user", run_id=run_id, outcome=outcome, tokens=1200, cost=0.03,
                                handoff=f"turn done ({outcome})")
                if len(busy) < 20:
                    busy.append(goal_id)
            if i % 50 == 7:  # one in fifty waits on a human
                gates.add(reg, "user", goal_id=goal_id, title="approve the deploy", scope="production")
    return busy


def goal_ids(url: str, limit: int = 20) -> list[str]:
    """Goals that have runs (reused registries)."""
    from loopx.ledger.registry import Registry

    with Registry.open(url) as reg, reg.read() as tx:
        rows = tx.query("SELECT goal_id, COUNT(*) AS n FROM runs GROUP BY goal_id ORDER BY n DESC, goal_id LIMIT ?",
                        (limit,))
        if rows:
            return [r["goal_id"] for r in rows]
        return [r["id"] for r in tx.query("SELECT id FROM goals ORDER BY created_seq LIMIT ?", (limit,))]


# ------------------------------------------------------------------------------ load client


def client(base: str, paths: list[str], threads: int, seconds: float, max_requests: int) -> dict:
    """Keep-alive GETs from ``threads`` threads until ``seconds`` pass or ``max_requests`` are made."""
    host, port = base.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads
    budget = threading.Semaphore(max_requests)
    start_gate = threading.Event()
    stop_at = [0.0]

    def worker(n: int):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        mine, k = latencies[n], n
        start_gate.wait()
        while time.perf_counter() < stop_at[0] and budget.acquire(blocking=False):
            path = paths[k % len(paths)]
            k += 1
            t0 = time.perf_counter()
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
            mine.append(time.perf_counter() - t0)
            if not ok:
                errors[n] += 1
        conn.close()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    begin = time.perf_counter()
    stop_at[0] = begin + seconds
    start_gate.set()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - begin
    every = sorted(x for mine in latencies for x in mine)
    count = len(every)

    def pct(p):
        return every[min(count - 1, int(p / 100 * count))] * 1000 if count else None

    return {"requests": count, "errors": sum(errors), "seconds": round(elapsed, 3),
            "requests_per_second": round(count / elapsed, 1) if elapsed else 0.0,
            "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99), "max_ms": every[-1] * 1000 if count else None,
            "threads": threads, "client": "python threads"}


def wrk_client(base: str, path: str, threads: int, seconds: float) -> dict:
    """The same load from Debian's ``wrk`` (C, event loop), with its latency distribution."""
    out = subprocess.run(["wrk", "-t", str(min(threads, 2)), "-c", str(threads), "-d", f"{int(seconds)}s",
                          "--latency", "--timeout", "30s", base.rstrip("/") + path],
                         capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    result = {"client": "wrk", "threads": threads, "raw": out}
    for line in out.splitlines():
        parts = line.split()
        if line.strip().startswith("Requests/sec:"):
            result["requests_per_second"] = float(parts[1])
        elif parts[:1] in (["50%"], ["90%"], ["99%"]):
            result[f"p{parts[0][:-1]}_ms"] = _wrk_ms(parts[1])
        elif "requests in" in line:
            result["requests"] = int(parts[0])
        elif line.strip().startswith("Non-2xx"):
            result["errors"] = int(parts[-1])
    result.setdefault("errors", 0)
    return result


def _wrk_ms(text: str) -> float:
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def serve_and_load(url: str, ids: list[str], env: dict, args, cache: bool = True) -> dict:
    """Start ``loopx status-server`` as its own process and load it from another process."""
    env = {**env, "LOOPX_STATUS_CACHE_SECONDS": "1" if cache else "0"}
    server = subprocess.Popen([sys.executable, "-m", "loopx", "status-server", "--port", "0", "--json"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = json.loads(server.stdout.readline())["url"]
        paths = [f"/api/goals/{g}" for g in ids]
        if args.wrk and shutil.which("wrk"):
            return wrk_client(base, paths[0], args.threads, args.seconds)
        load = subprocess.run([sys.executable, __file__, "--client", base, "--threads", str(args.threads),
                               "--seconds", str(args.seconds), *paths],
                              capture_output=True, text=True, timeout=args.seconds + 120, check=True)
        return json.loads(load.stdout)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--registry", default=None, help="registry file to fill (or reuse when it exists)")
    parser.add_argument("--wrk", action="store_true", help="load with Debian's wrk when installed")
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.seconds = min(args.seconds, 60.0)

    if args.client:  # the load generator, in its own process
        print(json.dumps(client(args.client, args.paths, args.threads, args.seconds, MAX_REQUESTS)))
        return

    if args.registry:
        run(args, args.registry)
    else:  # a registry of its own, removed at the end
        with scratch_dir("status") as tmp:
            run(args, os.path.join(tmp, "registry.db"))


def run(args, url: str) -> None:
    """Fill (or reuse) the registry at ``url``, then time status and load the dashboard API."""
    if os.path.exists(url):
        print(f"reusing {url}", file=sys.stderr)
        ids = goal_ids(url)
    else:
        print(f"filling {url} with {args.goals} goals...", file=sys.stderr)
        t0 = time.perf_counter()
        ids = fill(url, args.goals)
        print(f"  filled in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    env = child_env(LOOPX_REGISTRY=url)

    loopx = [sys.executable, "-m", "loopx"]
    times = measure({
        **floors(env),
        "loopx status --json": ([*loopx, "status", "--json"], env),
        "loopx status --goal-id G --json": ([*loopx, "status", "--goal-id", ids[0], "--json"], env),
    }, args.runs)
    loads = {"view cache on (default)": serve_and_load(url, ids, env, args),
             "view cache off": serve_and_load(url, ids, env, args, cache=False)}

    from loopx.ledger.registry import Registry

    with Registry.open(url) as reg, reg.read() as tx:
        goals = tx.one("SELECT COUNT(*) AS n FROM goals")["n"]
        events = tx.one("SELECT COUNT(*) AS n FROM events")["n"]
    print(f"registry: {goals} goals, {events} events ({url})")
    print(f"median of {args.runs} runs (ms):")
    for name, ms in times.items():
        print(f"  {name:<34} {ms:8.1f}")
    status_ms = times["loopx status --json"]
    print(f"  status above the import floor: {status_ms - times['import floor']:.1f} ms;"
          f" target <= 150 ms: {'met' if status_ms <= 150 else 'MISSED'}")
    for name, load in loads.items():
        print(f"GET /api/goals/{{id}} over {len(ids)} goals, {load['threads']} connections, {load['client']},"
              f" {name}:")
        print(f"  {load.get('requests')} requests, {load.get('errors')} errors,"
              f" {load['requests_per_second']:.0f} requests/s,"
              f" p50 {load['p50_ms']:.2f} ms, p90 {load['p90_ms']:.2f} ms, p99 {load['p99_ms']:.2f} ms")
        met = load["requests_per_second"] >= 1000 and load["p99_ms"] < 20
        print(f"  target >= 1,000 requests/s with p99 < 20 ms: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()

"""Benchmark: `quota should-run` and `loopx status` at 10,000 goals, on SQLite and on PostgreSQL.

Not a test. The PostgreSQL columns of the benchmark table. Each registry is filled once on SQLite
with the very fill functions of ``bench_should_run.py`` and ``bench_status.py`` (so the rows are
what those benchmarks measure), then moved to PostgreSQL with ``loopx registry copy`` (which
replays every event and verifies the copy). Then whole ``python -m loopx`` processes are timed
against both backends, interleaved so drift hits every case alike, beside ``python -c pass``
and the import floor (including psycopg, which a PostgreSQL registry imports). Usage::

    python bench/bench_postgres.py [--goals 10000] [--runs 15] [--url postgresql://...] [--keep]

Without ``--url`` (or ``LOOPX_TEST_POSTGRES_URL``) it starts a throwaway server of its own, as
the test suite does (``tests/pg_server.py``: a temp dir, a free 127.0.0.1 port), and deletes it
at the end. Each run uses fresh schemas ``bench_*`` in the database and drops them afterwards,
and its SQLite registries live in a temp directory that is removed, unless ``--keep`` is given
(which keeps nothing of a throwaway server). The server is local (127.0.0.1): a remote server
adds its round-trip time to every statement.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

from timing import IMPORT_FLOOR, child_env, floors, measure, print_table, scratch_dir

PG_IMPORT_FLOOR = IMPORT_FLOOR + ", psycopg"
AGENT = "bench-agent"


def new_schema(base: str, name: str) -> str:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{name}"


def drop_schema(base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--url", default=os.environ.get("LOOPX_TEST_POSTGRES_URL"),
                        help="a PostgreSQL database to create schemas in (default: LOOPX_TEST_POSTGRES_URL)")
    parser.add_argument("--keep", action="store_true", help="keep the filled schemas and files")
    args = parser.parse_args()
    server = None
    if not args.url:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.pg_server import ServerUnavailable, ThrowawayPostgres

        server = ThrowawayPostgres()
        try:
            args.url = server.start()
        except ServerUnavailable as exc:
            sys.exit(f"bench_postgres: give --url or set LOOPX_TEST_POSTGRES_URL; no throwaway server: {exc}")
        print("PostgreSQL: a throwaway server, deleted at the end", file=sys.stderr)
    try:
        with scratch_dir("postgres", keep=args.keep and server is None) as tmp:
            run(args, Path(tmp))
    finally:
        if server is not None:
            server.stop()


def run(args, tmp: Path) -> None:
    """Fill SQLite registries in ``tmp``, copy them to PostgreSQL, time both."""
    import bench_should_run  # beside this script (sys.path[0]), like timing
    import bench_status

    from loopx.views.registry_copy import copy_registry

    tag = uuid.uuid4().hex[:8]
    schemas = {"should_run": f"bench_sr_{tag}", "status": f"bench_st_{tag}"}
    py = sys.executable
    base = child_env(LOOPX_AGENT=AGENT)
    try:
        timings = {}
        started = time.perf_counter()
        sr_sqlite = str(tmp / "should-run.db")
        goal_id = bench_should_run.fill(sr_sqlite, args.goals)
        timings["fill should-run registry (SQLite)"] = time.perf_counter() - started
        started = time.perf_counter()
        st_sqlite = str(tmp / "status.db")
        busy = bench_status.fill(st_sqlite, args.goals)
        timings["fill status registry (SQLite)"] = time.perf_counter() - started

        urls = {}
        for name, source in (("should_run", sr_sqlite), ("status", st_sqlite)):
            urls[name] = new_schema(args.url, schemas[name])
            started = time.perf_counter()
            summary = copy_registry(source, urls[name])
            timings[f"registry copy {name} -> PostgreSQL ({summary['events']} events)"] = time.perf_counter() - started

        cases = {**floors(base), "import floor + psycopg": ([py, "-c", PG_IMPORT_FLOOR], base)}
        for backend, sr, st in (("sqlite", sr_sqlite, st_sqlite),
                                ("postgres", urls["should_run"], urls["status"])):
            cases[f"should-run @ {args.goals} [{backend}]"] = (
                [py, "-m", "loopx", "--format", "json", "quota", "should-run", "--goal-id", goal_id],
                {**base, "LOOPX_REGISTRY": sr})
            cases[f"status --json @ {args.goals} [{backend}]"] = (
                [py, "-m", "loopx", "status", "--json"], {**base, "LOOPX_REGISTRY": st})
            cases[f"status --goal-id @ {args.goals} [{backend}]"] = (
                [py, "-m", "loopx", "status", "--goal-id", busy[0], "--json"], {**base, "LOOPX_REGISTRY": st})
        medians = measure(cases, args.runs)

        for what, seconds in timings.items():
            print(f"{what}: {seconds:.1f} s")
        print(f"{args.runs} runs per case, median wall time of a whole process, PostgreSQL on 127.0.0.1")
        print_table(medians, width=42)
        print()
        print(f"| backend | should-run @ {args.goals} | status --json @ {args.goals} | status --goal-id @ {args.goals} |")
        print("|---|---|---|---|")
        for backend in ("sqlite", "postgres"):
            cells = [medians[f"{case} @ {args.goals} [{backend}]"]
                     for case in ("should-run", "status --json", "status --goal-id")]
            print(f"| {backend} | " + " | ".join(f"{ms:.0f} ms" for ms in cells) + " |")
    finally:
        if not args.keep:
            for name in schemas.values():
                drop_schema(args.url, name)
        else:
            print(f"kept schemas {', '.join(schemas.values())}")


if __name__ == "__main__":
    main()

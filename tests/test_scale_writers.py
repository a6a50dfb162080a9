"""SQLite writers queue on a sidecar file lock: real processes, nothing lost, nobody skips the queue.

Latency figures are the benchmark's (``bench/run.py``), not asserted here.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

from loopx.registry import Registry
from tests.conftest import loopx_env

WRITER = """
import json, sys
from loopx import todos
from loopx.registry import Registry
url, goal, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Registry.open(url) as reg:
    ids = [todos.add(reg, "user", goal_id=goal, text=f"w{i}")["id"] for i in range(n)]
print(json.dumps(ids))
"""


def _goal(url: str) -> str:
    from loopx import project_prompt

    with Registry.open(url) as reg:
        return project_prompt.create(reg, "user", title="shared")["id"]


def _writers(url: str, goal: str, processes: int, each: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", WRITER, url, goal, str(each)], env=loopx_env(url),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(processes)]


def test_eight_writing_processes_lose_nothing(sqlite_url):
    goal = _goal(sqlite_url)
    procs = _writers(sqlite_url, goal, processes=8, each=25)
    written = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        written += json.loads(out)
    assert len(set(written)) == 200
    with Registry.open(sqlite_url) as reg, reg.read() as tx:
        stored = {r["id"] for r in tx.query("SELECT id FROM todos WHERE goal_id = ?", (goal,))}
        seqs = [r["seq"] for r in tx.query("SELECT seq FROM events WHERE goal_id = ? ORDER BY seq", (goal,))]
    assert stored == set(written)
    assert seqs == list(range(1, 202))  # created + 200 todos, no gap, no duplicate


def test_a_writer_waits_in_the_queue_not_in_sqlite(sqlite_url):
    goal = _goal(sqlite_url)
    fd = os.open(f"{sqlite_url}-lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer is at the head of the queue
        proc = _writers(sqlite_url, goal, processes=1, each=1)[0]
        time.sleep(1.5)
        with Registry.open(sqlite_url, readonly=True) as reg, reg.read() as tx:
            assert tx.one("SELECT count(*) AS n FROM todos")["n"] == 0
        assert proc.poll() is None  # still queued
        fcntl.flock(fd, fcntl.LOCK_UN)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        os.close(fd)
    with Registry.open(sqlite_url, readonly=True) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM todos")["n"] == 1


def test_reads_do_not_queue_behind_writers(sqlite_url):
    goal = _goal(sqlite_url)
    fd = os.open(f"{sqlite_url}-lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = subprocess.run([sys.executable, "-m", "loopx", "status", "--goal-id", goal, "--json"],
                           env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["goal"]["id"] == goal
    finally:
        os.close(fd)

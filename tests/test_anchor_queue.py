"""Writers meet again at the rollback anchor after each commit (loopx/anchor.py): they queue for it
first come, first served, blocked on a lock (woken when the writer ahead is done), never polling
in SQLite's busy handler; real processes, nothing lost, the anchor at every goal's head.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

from loopx import anchor, keys
from loopx.registry import Registry
from loopx.store.writer_queue import WriterQueue, tickets_taken
from loopx.testing import wait_until
from tests.conftest import loopx_env
from tests.factories import make_goal

WRITER = """
import json, sys
from loopx import todos
from loopx.registry import Registry
url, goal, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Registry.open(url) as reg:
    ids = [todos.add(reg, "user", goal_id=goal, text=f"w{i}")["id"] for i in range(n)]
print(json.dumps(ids))
"""


def _writer(url: str, goal: str, n: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, url, goal, str(n)], env=loopx_env(url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _registry_id(url: str) -> str:
    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        return keys.stored_id(tx)


def _heads(url: str) -> dict:
    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        return {r["goal_id"]: {"seq": r["seq"], "hash": r["head_hash"]}
                for r in tx.query("SELECT goal_id, seq, head_hash FROM goal_heads")}


@contextlib.contextmanager
def _head_of_anchor_queue(lock: str):
    """This test process takes a place in the anchor's queue (as a writer moving the anchor would)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    queue = WriterQueue(fd)
    queue.enter()
    try:
        yield
    finally:
        queue.leave()
        os.close(fd)


def _blocked_on(lock: str) -> bool:
    inode = os.stat(lock).st_ino
    with open("/proc/locks") as f:
        return any(" -> " in line and f":{inode} " in line for line in f)


def test_a_writer_waits_for_the_anchor_in_its_queue(sqlite_url):
    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="anchored")["goal"]
    rid = _registry_id(sqlite_url)
    lock = f"{anchor.path(rid)}-lock"
    before = anchor.read(rid, goal)[0]
    assert before == _heads(sqlite_url)[goal]
    with _head_of_anchor_queue(lock):
        start = tickets_taken(lock)
        proc = _writer(sqlite_url, goal, 1)

        def queued():
            assert proc.poll() is None, proc.communicate()
            return tickets_taken(lock) > start and _blocked_on(lock)

        wait_until(queued, "the writer to queue for the anchor", timeout=30, interval=0.02)
        # Its write is committed; only the anchor waits for the writer ahead.
        assert _heads(sqlite_url)[goal]["seq"] == before["seq"] + 1
        assert anchor.read(rid, goal)[0] == before
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert anchor.read(rid, goal)[0] == _heads(sqlite_url)[goal]


def test_eight_writers_lose_nothing_and_the_anchor_keeps_up(sqlite_url):
    with Registry.open(sqlite_url) as reg:
        goals = [make_goal(reg, title=f"writer {k}")["goal"] for k in range(8)]
    procs = [_writer(sqlite_url, g, 15) for g in goals]
    written = {}
    for g, p in zip(goals, procs):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        written[g] = json.loads(out)
    rid = _registry_id(sqlite_url)
    assert tickets_taken(f"{anchor.path(rid)}-lock") >= 8 * 15  # every anchor move queued
    heads = _heads(sqlite_url)
    with Registry.open(sqlite_url, readonly=True) as reg, reg.read() as tx:
        for g in goals:
            stored = [r["id"] for r in tx.query("SELECT id FROM todos WHERE goal_id = ? ORDER BY created_seq", (g,))]
            assert stored[-15:] == written[g]
            assert anchor.read(rid, g)[0] == heads[g]
        newest = tx.one("SELECT max(id) AS m FROM events")["m"]
    assert anchor.read(rid, goals[0])[1] == newest

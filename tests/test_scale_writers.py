"""SQLite writers queue on a sidecar file lock: real processes, nothing lost, served in arrival
order (nobody skips the queue, not even a process that writes again at once), a killed writer
never wedges it.

Latency figures are the benchmark's (``bench/run.py``), not asserted here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

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


TEXT_WRITER = """
import sys
from loopx import todos
from loopx.registry import Registry
url, goal, text, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with Registry.open(url) as reg:
    for i in range(n):
        todos.add(reg, "user", goal_id=goal, text=f"{text}{i}")
"""


@contextlib.contextmanager
def _head_of_queue(url: str):
    """This test process takes a place in the writers' queue (as another writer in the middle of a
    write would) and keeps it until the block ends."""
    fd = os.open(f"{url}-lock", os.O_RDWR | os.O_CREAT)
    queue = WriterQueue(fd)
    queue.enter()
    try:
        yield queue
    finally:
        queue.leave()
        os.close(fd)


def _queued(url: str, tickets: int, proc: subprocess.Popen) -> None:
    """Wait until ``tickets`` places have been taken in the queue (``proc`` has queued)."""

    def queued():
        assert proc.poll() is None, proc.communicate()
        return tickets_taken(f"{url}-lock") >= tickets

    wait_until(queued, "the writer to queue", interval=0.02)


def _blocked_on_queue(url: str) -> bool:
    """Whether a process is blocked on a lock of ``url``'s queue file (a ``->`` line of /proc/locks)."""
    inode = os.stat(f"{url}-lock").st_ino
    with open("/proc/locks") as f:
        return any(" -> " in line and f":{inode} " in line for line in f)


def _text_writer(url: str, goal: str, text: str, n: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TEXT_WRITER, url, goal, text, str(n)], env=loopx_env(url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _todo_texts(url: str, goal: str) -> list[str]:
    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        return [r["text"] for r in tx.query("SELECT text FROM todos WHERE goal_id = ? ORDER BY created_seq", (goal,))]


def _goal(url: str) -> str:
    with Registry.open(url) as reg:
        return make_goal(reg, title="shared")["goal"]


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
    with _head_of_queue(sqlite_url):  # another writer is at the head of the queue
        start = tickets_taken(f"{sqlite_url}-lock")
        proc = _writers(sqlite_url, goal, processes=1, each=1)[0]
        _queued(sqlite_url, start + 1, proc)
        wait_until(lambda: _blocked_on_queue(sqlite_url), "the writer to block on the queue's lock")
        with Registry.open(sqlite_url, readonly=True) as reg, reg.read() as tx:
            assert tx.one("SELECT count(*) AS n FROM todos")["n"] == 0
        assert proc.poll() is None  # still queued
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    with Registry.open(sqlite_url, readonly=True) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM todos")["n"] == 1


def test_writers_are_served_in_arrival_order_and_a_repeat_writer_goes_to_the_back(sqlite_url):
    goal = _goal(sqlite_url)
    with _head_of_queue(sqlite_url):
        start = tickets_taken(f"{sqlite_url}-lock")
        # "a" writes 5 times in a row as fast as it can; "b" and "c" once each, queued after a's
        # first write. Each of a's next writes must queue behind b and c, not take the lock back.
        procs = []
        for k, (text, n) in enumerate((("a", 5), ("b", 1), ("c", 1))):
            procs.append(_text_writer(sqlite_url, goal, text, n))
            _queued(sqlite_url, start + k + 1, procs[-1])
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert _todo_texts(sqlite_url, goal) == ["a0", "b0", "c0", "a1", "a2", "a3", "a4"]


def test_a_writer_killed_while_queued_does_not_wedge_the_queue(sqlite_url):
    goal = _goal(sqlite_url)
    with _head_of_queue(sqlite_url):
        start = tickets_taken(f"{sqlite_url}-lock")
        doomed = _text_writer(sqlite_url, goal, "doomed", 1)
        _queued(sqlite_url, start + 1, doomed)
        after = _text_writer(sqlite_url, goal, "after", 1)
        _queued(sqlite_url, start + 2, after)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
    out, err = after.communicate(timeout=60)
    assert after.returncode == 0, err
    assert _todo_texts(sqlite_url, goal) == ["after0"]


def test_reads_do_not_queue_behind_writers(sqlite_url):
    goal = _goal(sqlite_url)
    with _head_of_queue(sqlite_url):
        r = subprocess.run([sys.executable, "-m", "loopx", "status", "--goal-id", goal, "--json"],
                           env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["goal"]["id"] == goal


def test_every_64th_queued_write_checkpoints_the_wal_into_the_database_file(sqlite_url, tmp_path):
    """Queued writers checkpoint by ticket, after leaving the queue (SQLite's own checkpoint ran
    inside the commit that crossed 1,000 WAL pages, holding every writer behind it): after the
    64th write the database file alone - without its WAL - holds every write."""
    import shutil
    import sqlite3

    from loopx import todos
    from loopx.store.sqlite import CHECKPOINT_EVERY

    goal = _goal(sqlite_url)
    lock = f"{sqlite_url}-lock"
    with Registry.open(sqlite_url) as reg:
        while tickets_taken(lock) < CHECKPOINT_EVERY:
            todos.add(reg, "user", goal_id=goal, text=f"t{tickets_taken(lock)}")
        written = len(_todo_texts(sqlite_url, goal))
        alone = tmp_path / "alone.db"
        shutil.copyfile(sqlite_url, alone)  # the main file only: what a checkpoint copied into it
        todos.add(reg, "user", goal_id=goal, text="after")  # the 65th: in the WAL only
        shutil.copyfile(sqlite_url, tmp_path / "later.db")
    conn = sqlite3.connect(alone)
    assert conn.execute("SELECT count(*) FROM todos WHERE goal_id = ?", (goal,)).fetchone()[0] == written == 63
    conn.close()
    conn = sqlite3.connect(tmp_path / "later.db")
    assert conn.execute("SELECT count(*) FROM todos WHERE goal_id = ?", (goal,)).fetchone()[0] == written
    conn.close()


def test_the_rollback_anchor_moved_in_the_queue_is_checkpointed_after_the_queue(sqlite_url, tmp_path):
    """The anchor's own automatic checkpoint (every ~1,000 WAL pages: page copy and 2 fsyncs) ran
    inside the commit that moved it, so inside the registry's writers' queue, holding every writer
    behind it; it is off there, and the writer of every 64th ticket checkpoints the anchor file
    with the registry after leaving the queue: after the 64th write the anchor file alone (without
    its WAL) holds the goal's newest head."""
    import shutil
    import sqlite3

    from loopx import anchor, keys, todos
    from loopx.store.sqlite import CHECKPOINT_EVERY

    goal = _goal(sqlite_url)
    lock = f"{sqlite_url}-lock"
    with Registry.open(sqlite_url) as reg:
        while tickets_taken(lock) < CHECKPOINT_EVERY:
            todos.add(reg, "user", goal_id=goal, text=f"t{tickets_taken(lock)}")
        with reg.read() as tx:
            registry_id = keys.keyring(tx).registry_id
            seq = tx.one("SELECT max(seq) AS seq FROM events WHERE goal_id = ?", (goal,))["seq"]
        alone = tmp_path / "anchor-alone.db"
        shutil.copyfile(anchor.path(registry_id), alone)  # the main file only
    conn = sqlite3.connect(alone)
    assert conn.execute("SELECT seq FROM heads WHERE goal_id = ?", (goal,)).fetchone() == (seq,) == (64,)
    conn.close()

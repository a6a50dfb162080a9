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

import pytest

from loopx.ledger.registry import Registry
from loopx.store.writer_queue import WriterQueue, tickets_taken
from loopx.testing import wait_until
from tests.conftest import loopx_env
from tests.factories import make_goal

WRITER = """
import json, sys
from loopx.domain import todos
from loopx.ledger.registry import Registry
url, goal, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Registry.open(url) as reg:
    ids = [todos.add(reg, "user", goal_id=goal, text=f"w{i}")["id"] for i in range(n)]
print(json.dumps(ids))
"""


TEXT_WRITER = """
import sys
from loopx.domain import todos
from loopx.ledger.registry import Registry
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


@pytest.mark.slow
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


BURST_WRITER = """
import os, sys, time
from loopx.domain import todos
from loopx.ledger.registry import Registry
url, goal, n, start, size, spawn = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
catch_up = int(sys.argv[7])
if spawn == "no":
    sys.executable = ""  # an embedded interpreter: no checkpointer process can be started
if catch_up:
    # A smaller WAL allowed before the catch-up (128 MiB takes ~1,500 writes), handed to the
    # checkpointer process this process starts.
    from loopx.store import checkpointer
    checkpointer.CATCH_UP_PAGES = catch_up
text = "x" * size
reg = Registry.open(url)
todos.add(reg, "user", goal_id=goal, text="warm-up")  # imports and plugins, before the start
time.sleep(max(0.0, start - time.time()))
for i in range(n):
    todos.add(reg, "user", goal_id=goal, text=f"{i}{text}")
os._exit(0)  # no close: closing the last connection would checkpoint the WAL itself
"""


def _burst(url: str, goals: list[str], each: int, size: int = 10, spawn: bool = True,
           catch_up: int = 0) -> list[subprocess.Popen]:
    """One writer process per goal, starting together, each writing ``each`` todos with no pause
    (``catch_up``: their :data:`loopx.store.checkpointer.CATCH_UP_PAGES`, 0: as it is)."""
    import time

    start = time.time() + 1.0
    return [subprocess.Popen([sys.executable, "-c", BURST_WRITER, url, goal, str(each), str(start), str(size),
                              "yes" if spawn else "no", str(catch_up)], env=loopx_env(url), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for goal in goals]


def _in_main_file(path, sql: str, params=()):
    """``sql``'s answer from the database file ``path`` alone (a copy without its WAL): what a
    checkpoint has copied into it."""
    import shutil
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        shutil.copyfile(path, f"{d}/alone.db")
        conn = sqlite3.connect(f"{d}/alone.db")
        try:
            return conn.execute(sql, params).fetchone()
        except sqlite3.DatabaseError:  # copied in the middle of a checkpoint's page writes
            return None
        finally:
            conn.close()


def _checkpointers(db: str) -> list[int]:
    """The running checkpointer processes of the registry ``db`` (from ``/proc``)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"loopx/store/checkpointer.py") for a in argv) and os.fsencode(db) in argv:
                found.append(int(pid))
    return found


def test_a_checkpointer_process_copies_the_wal_off_the_writers_path_and_ends_when_writers_stop(sqlite_url):
    """The WAL checkpoint (page copy + fsyncs: 8-20 ms) was the latency of the writer of every
    64th ticket; a process of its own does it: started by that writer, it copies the WAL into the
    database file - also the writes after the last 64th ticket, once writers are quiet, with the
    writer gone without closing - and then ends by itself."""
    from loopx.store.sqlite import CHECKPOINT_EVERY

    goal = _goal(sqlite_url)
    writer = _burst(sqlite_url, [goal], CHECKPOINT_EVERY + 10)[0]
    seen: dict[int, list[bytes]] = {}  # checkpointer -> the LOOPX_* variables of its environment

    def look():
        for pid in _checkpointers(sqlite_url):
            if pid not in seen:
                with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
                    seen[pid] = [e for e in f.read().split(b"\0") if e.startswith(b"LOOPX_")]

    def written():
        look()
        return writer.poll() is not None

    wait_until(written, "the writer to finish", interval=0.01)
    assert writer.returncode == 0, writer.communicate()
    count = "SELECT count(*) FROM todos WHERE goal_id = ?"

    def copied():
        look()
        return _in_main_file(sqlite_url, count, (goal,)) == (CHECKPOINT_EVERY + 11,)

    wait_until(copied, "every write in the database file alone", interval=0.02)
    assert seen and writer.pid not in seen  # a process of its own
    # with none of the writer's environment (LOOPX_RUN_ID: a run's processes all end with it)
    assert all(found == [] for found in seen.values()), seen
    wait_until(lambda: not _checkpointers(sqlite_url), "the checkpointer to end")


def test_the_rollback_anchor_is_checkpointed_with_the_registry(sqlite_url):
    """The anchor's own automatic checkpoint (every ~1,000 WAL pages: page copy and 2 fsyncs) ran
    inside the commit that moved it, so inside the registry's writers' queue, holding every writer
    behind it; it is held back there, and the registry's checkpointer checkpoints the anchor file
    too: after the 64th write the anchor file alone (without its WAL) holds the goal's newest
    head."""
    from loopx.ledger import anchor, keys
    from loopx.domain import todos
    from loopx.store.sqlite import CHECKPOINT_EVERY

    goal = _goal(sqlite_url)
    lock = f"{sqlite_url}-lock"
    with Registry.open(sqlite_url) as reg:
        while tickets_taken(lock) < CHECKPOINT_EVERY:
            todos.add(reg, "user", goal_id=goal, text=f"t{tickets_taken(lock)}")
        with reg.read() as tx:
            registry_id = keys.keyring(tx).registry_id
            seq = tx.one("SELECT max(seq) AS seq FROM events WHERE goal_id = ?", (goal,))["seq"]
        assert seq == 64
        head = "SELECT seq FROM heads WHERE goal_id = ?"
        wait_until(lambda: _in_main_file(anchor.path(registry_id), head, (goal,)) == (seq,),
                   "the anchor file alone to hold the newest head", interval=0.02)


@pytest.mark.parametrize("spawn", [True, False], ids=["checkpointer", "no-checkpointer-process"])
@pytest.mark.slow
def test_the_wal_stays_bounded_under_writers_that_never_pause(sqlite_url, spawn):
    """SQLite starts the WAL over only when a writer begins while every frame has been copied; a
    checkpoint running beside writers that never pause never gets there, and the WAL grew with
    every write (~60 MiB here). A pass that leaves it long is repeated inside the writers' queue,
    so it starts over - also when no checkpointer process can be started and writers checkpoint
    themselves."""
    from loopx.store.checkpointer import EVERY

    goals = [_goal(sqlite_url) for _ in range(4)]
    catch_up = 2048  # 8 MiB
    procs = _burst(sqlite_url, goals, 150, size=8000, spawn=spawn, catch_up=catch_up)
    wal, most = f"{sqlite_url}-wal", 0
    while any(p.poll() is None for p in procs):
        try:
            most = max(most, os.path.getsize(wal))
        except OSError:
            pass
    for p in procs:
        assert p.returncode == 0, p.communicate()
    with Registry.open(sqlite_url, readonly=True) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM todos")["n"] == 4 * 151  # nothing lost
    # The catch-up's threshold, plus what the writers add between two passes (~25 pages a write).
    assert most <= (catch_up + 2 * EVERY * 30) * 4096, most


@pytest.mark.slow
def test_a_killed_checkpointer_loses_nothing_and_wedges_nothing(sqlite_url):
    """kill -9 of the checkpointer (in a pass or inside the queue) loses no write and never holds
    the writers up: its locks go with it, and the next 64th ticket starts another."""
    goals = [_goal(sqlite_url) for _ in range(4)]
    procs = _burst(sqlite_url, goals, 150, size=2000)
    killed = set()
    while any(p.poll() is None for p in procs):
        for pid in set(_checkpointers(sqlite_url)) - killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
    for p in procs:
        assert p.returncode == 0, p.communicate()
    assert len(killed) >= 2  # killed, and started again
    with Registry.open(sqlite_url) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM todos")["n"] == 4 * 151
        for goal in goals:
            seqs = [r["seq"] for r in tx.query("SELECT seq FROM events WHERE goal_id = ? ORDER BY seq", (goal,))]
            assert seqs == list(range(1, 153))
        assert reg.store.integrity_check() == []


def test_the_checkpointer_never_imports_code_from_the_writers_working_directory(sqlite_url, tmp_path):
    """The writer may work in a directory an agent can write (the broker, in the agent's workdir):
    a ``loopx`` package planted there must not be what the checkpointer process runs."""
    from loopx.store.sqlite import CHECKPOINT_EVERY

    planted = tmp_path / "workdir"
    (planted / "loopx" / "store").mkdir(parents=True)
    marker = tmp_path / "ran-planted-code"
    (planted / "loopx" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (planted / "loopx" / "store" / "__init__.py").write_text("")
    (planted / "loopx" / "store" / "checkpointer.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    goal = _goal(sqlite_url)
    # -P: the writer itself (a ``loopx`` command, the broker) does not look in its working directory.
    writer = subprocess.Popen([sys.executable, "-P", "-c", BURST_WRITER, sqlite_url, goal, str(CHECKPOINT_EVERY + 10),
                               "0", "10", "yes", "0"], env=loopx_env(sqlite_url), cwd=planted,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    count = "SELECT count(*) FROM todos WHERE goal_id = ?"
    wait_until(lambda: marker.exists() or _in_main_file(sqlite_url, count, (goal,)) == (CHECKPOINT_EVERY + 11,),
               "the checkpointer to copy every write", interval=0.02)
    assert not marker.exists()

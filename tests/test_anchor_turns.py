"""Writers of one rollback anchor take turns on a lock the kernel hands over (issue 25).

Every committed write moves the anchor (:mod:`loopx.ledger.anchor`) right after its commit; with 8
processes writing, two often finished together and SQLite's busy handler made the later one
poll, sleeping up to 100 ms at a time, for a write that takes a fraction of a millisecond. Now a
writer of an SQLite registry moves the anchor before it lets the next writer in (so writers of
one registry never meet on the anchor, and the next one finds it where the registry is), and a
writer that does find another's anchor write in progress is woken the moment it ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from loopx.ledger import anchor
from loopx.testing import wait_until
from tests.factories import make_goal

HOLDER = textwrap.dedent("""
    import fcntl, os, sqlite3, sys
    from loopx.ledger import anchor
    rid = sys.argv[1]
    # What another process's anchor write holds while it is under way: the writers' lock, then
    # SQLite's write lock on the anchor. It lets go when told to (a line on stdin), in that order.
    fd = os.open(anchor.lock_path(rid), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    conn = sqlite3.connect(anchor.path(rid), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    fcntl.flock(fd, fcntl.LOCK_UN)
""")


def queued_on_lock(path) -> bool:
    """Whether a thread of this process waits in the kernel's queue for ``path``'s ``flock``
    (a ``->`` line of /proc/locks: the kernel wakes it the moment the holder lets go)."""
    ino = os.stat(path).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1:3] == ["->", "FLOCK"] and fields[5] == str(os.getpid()) and fields[6].endswith(f":{ino}"):
            return True
    return False


def start_holder(rid: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, rid], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def release(holder: subprocess.Popen) -> None:
    if holder.stdin and not holder.stdin.closed:
        holder.stdin.write("go\n")
        holder.stdin.close()
    holder.wait(timeout=30)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_writer_waiting_for_anothers_anchor_write_is_woken_when_it_ends(private_key_dir):
    rid = "r-turns"
    anchor.record(rid, "g-1", 1, "h1", 1)
    holder = start_holder(rid)
    writer = threading.Thread(target=anchor.record, args=(rid, "g-1", 2, "h2", 2))
    try:
        writer.start()
        # It waits in the kernel's queue for the writers' lock, which hands the lock over the
        # moment the other write ends - not in SQLite's busy handler, which sleeps and retries at
        # its own pace (78 ms after the release, measured before issue 25). No wall clock needed:
        # the queue is visible in /proc/locks.
        wait_until(lambda: queued_on_lock(anchor.lock_path(rid)), "the writer to queue on the anchor's lock")
        assert writer.is_alive()
    finally:
        release(holder)
        writer.join(30)
    assert not writer.is_alive()
    assert anchor.read(rid, "g-1") == ({"seq": 2, "hash": "h2"}, 2)


def test_the_anchors_lock_file_is_private_and_goes_with_the_registry(private_key_dir):
    import stat

    from loopx.ledger import keys

    anchor.record("r-lockfile", "g-1", 1, "h1", 1)
    lock = anchor.lock_path("r-lockfile")
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    keys.forget("r-lockfile", "sqlite:/nowhere.db")
    assert not lock.exists()


def test_the_next_writer_finds_the_anchor_where_the_last_commit_left_the_registry(private_key_dir, sqlite_url):
    from loopx import api
    from loopx.ledger import keys
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as first, Registry.open(sqlite_url) as second:
        g = make_goal(first, title="anchored")["goal"]
        with first.read() as tx:
            rid = keys.stored_id(tx)
        holder = start_holder(rid)  # another anchor write under way
        inside, go, seen, wrote = threading.Event(), threading.Event(), {}, {}

        def slow(w):
            api.todos.add_in(w, text="first")
            wrote["seq"] = w.revision
            inside.set()
            go.wait(30)

        def reads_anchor(w):
            seen["anchor"] = anchor.read(rid, g)[0]
            api.todos.add_in(w, text="second")

        try:
            a = threading.Thread(target=lambda: first.mutate("user", slow, goal_id=g))
            a.start()
            assert inside.wait(30)
            b = threading.Thread(target=lambda: second.mutate("user", reads_anchor, goal_id=g))
            b.start()  # queued behind the first writer
            go.set()
            # The first writer has committed and waits for the other anchor write, still holding
            # the writers' queue; only then does that write end.
            wait_until(lambda: queued_on_lock(anchor.lock_path(rid)), "the first writer to queue on the anchor's lock")
        finally:
            release(holder)
            a.join(30)
            b.join(30)
    # The first writer's anchor write waited for the other one while it still held the writers'
    # queue: the second writer found the anchor at the first one's commit, not behind it.
    assert seen["anchor"]["seq"] == wrote["seq"]

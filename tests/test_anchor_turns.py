"""Writers of one rollback anchor take turns on a lock the kernel hands over (issue 25).

Every committed write moves the anchor (:mod:`loopx.anchor`) right after its commit; with 8
processes writing, two often finished together and SQLite's busy handler made the later one
poll, sleeping up to 100 ms at a time, for a write that takes a fraction of a millisecond. Now a
writer of an SQLite registry moves the anchor before it lets the next writer in (so writers of
one registry never meet on the anchor, and the next one finds it where the registry is), and a
writer that does find another's anchor write in progress is woken the moment it ends.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from loopx import anchor
from tests.factories import make_goal

HOLDER = textwrap.dedent("""
    import fcntl, os, sqlite3, sys, time
    from loopx import anchor
    rid, hold = sys.argv[1], float(sys.argv[2])
    # What another process's anchor write holds while it is under way: the writers' lock, then
    # SQLite's write lock on the anchor.
    fd = os.open(anchor.lock_path(rid), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    conn = sqlite3.connect(anchor.path(rid), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    time.sleep(hold)
    conn.execute("COMMIT")
    released = time.time()
    fcntl.flock(fd, fcntl.LOCK_UN)
    print(released, flush=True)
""")


def test_a_writer_waiting_for_anothers_anchor_write_is_woken_when_it_ends(private_key_dir):
    rid = "r-turns"
    anchor.record(rid, "g-1", 1, "h1", 1)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, rid, "0.35"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        anchor.record(rid, "g-1", 2, "h2", 2)
        done = time.time()
        released = float(holder.stdout.readline())
    finally:
        holder.wait(timeout=30)
    # It waited for the other write (which held SQLite's lock) and went on at once: SQLite's busy
    # handler alone would have retried at its own pace, 78 ms after the release here.
    assert released <= done < released + 0.025, done - released
    assert anchor.read(rid, "g-1") == ({"seq": 2, "hash": "h2"}, 2)


def test_the_anchors_lock_file_is_private_and_goes_with_the_registry(private_key_dir):
    import stat

    from loopx import keys

    anchor.record("r-lockfile", "g-1", 1, "h1", 1)
    lock = anchor.lock_path("r-lockfile")
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    keys.forget("r-lockfile", "sqlite:/nowhere.db")
    assert not lock.exists()


def test_the_next_writer_finds_the_anchor_where_the_last_commit_left_the_registry(private_key_dir, sqlite_url):
    import threading

    from loopx import api, keys
    from loopx.registry import Registry

    with Registry.open(sqlite_url) as first, Registry.open(sqlite_url) as second:
        g = make_goal(first, title="anchored")["goal"]
        with first.read() as tx:
            rid = keys.stored_id(tx)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, rid, "0.5"], stdout=subprocess.PIPE, text=True)
        inside, go, seen, wrote = threading.Event(), threading.Event(), {}, {}

        def slow(w):
            api.writer_add_todo(w, text="first")
            wrote["seq"] = w.revision
            inside.set()
            go.wait(30)

        def reads_anchor(w):
            seen["anchor"] = anchor.read(rid, g)[0]
            api.writer_add_todo(w, text="second")

        try:
            assert holder.stdout.readline().strip() == "held"  # another anchor write under way
            a = threading.Thread(target=lambda: first.mutate("user", slow, goal_id=g))
            a.start()
            assert inside.wait(30)
            b = threading.Thread(target=lambda: second.mutate("user", reads_anchor, goal_id=g))
            b.start()  # queued behind the first writer
            go.set()
            a.join(30)
            b.join(30)
        finally:
            holder.wait(timeout=30)
    # The first writer's anchor write waited for the other one while it still held the writers'
    # queue: the second writer found the anchor at the first one's commit, not behind it.
    assert seen["anchor"]["seq"] == wrote["seq"]

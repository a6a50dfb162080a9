"""The registry's WAL checkpoint, done by a process of its own: off every writer's path.

A checkpoint copies the WAL's committed pages into the database file and fsyncs it: 8-20 ms at
its p99 on a loaded machine, nearly all of it waiting for the disk (~3 ms of CPU). Done by the
writer whose commit crossed 1,000 pages (SQLite's automatic checkpoint) it held every queued
writer behind it; done by the writer of every 64th ticket after it left the queue, it was that
write's latency (one write in 64: more than the p99's one in 100); on a thread of the writing
process, its hand-offs of the GIL landed on the other writes. So a checkpointer *process* does it:

- The writer of every :data:`EVERY`-th ticket (or of a transaction that changed many rows), after
  leaving the writers' queue, calls :func:`request`: when no checkpointer holds the lock byte of
  ``registry.db-lock`` (:func:`~loopx.store.writer_queue.claim_checkpointer`), it takes it and
  starts ``python -S -P .../loopx/store/checkpointer.py`` (this file, run with the loopx it belongs
  to) detached (a session of its own, no terminal, its output to ``/dev/null``), handing it the
  locked descriptor: there is never more than one, and the lock goes when it ends, however it
  ends. Starting one costs the writer ~0.4 ms (``posix_spawn``), once per burst of writing. It
  runs under ``SCHED_BATCH``: its wake-ups never preempt a writer.
- The checkpointer makes a pass (:func:`settle`) at once, then every :data:`EVERY` tickets, and
  one last pass when no writer has taken a ticket for :data:`IDLE` seconds; then it exits.
- A pass is PASSIVE: it never waits for, nor blocks, readers or writers. But SQLite starts its
  WAL over only when a writer begins while every frame is copied, and under writers that never
  pause new frames always arrive during a pass: the WAL grew without bound (367 MB after 4,800
  writes at 100,000 goals). So a pass that leaves the WAL at :data:`CATCH_UP_PAGES` or more
  repeats itself inside the writers' queue: only the frames written during the first pass are
  left to copy, and the next writer starts the WAL over.
- Nothing depends on the checkpointer for correctness: a checkpoint moves committed pages, it
  loses nothing when killed. When it cannot be started, the writer makes the pass itself (as
  before). The queued writers keep SQLite's automatic checkpoint at :data:`SAFETY_PAGES`, far
  above what the checkpointer lets the WAL reach, for a checkpointer that is stopped.

This module imports only the standard library and :mod:`loopx.store.writer_queue`: the
checkpointer process starts in ~50 ms on a loaded 2-core machine.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from urllib.parse import quote

#: A pass every this many tickets of the writers' queue.
EVERY = 64
#: A pass that leaves at least this many frames in the registry's WAL (128 MiB of 4 KiB pages;
#: ~1,300-1,700 writes of a todo at 100,000-1,000,000 goals) is repeated inside the writers'
#: queue, so that the WAL starts over; a file written in the queue beside it (the rollback
#: anchor, ~1/9 of the registry's frames a write), at a quarter. Rare on purpose: the repeat holds
#: the writers behind it for two fsyncs (18-29 ms measured at load 7-8; the disk is shared).
CATCH_UP_PAGES = 32768
#: SQLite's own automatic checkpoint for queued writers: a safety net that a running
#: checkpointer never lets the WAL reach (it would run inside the queue).
SAFETY_PAGES = 2 * CATCH_UP_PAGES
#: How often the checkpointer looks at the ticket counter, and how long without a new ticket
#: it waits before its last pass and exit (seconds).
POLL = 0.02
IDLE = 0.5

_CHILDREN: list[int] = []  # checkpointers this process started, reaped when found ended
#: What of the writer's environment the checkpointer gets: what an interpreter may need to start.
_ENV_KEPT = frozenset({"PATH", "PYTHONHOME", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "TMPDIR", "SQLITE_TMPDIR"})


def request(db: str, sidecars=(), queue=None) -> None:
    """Have ``db`` (and the SQLite files ``sidecars`` written in its queue) checkpointed: by the
    running checkpointer, else by one started now, else (none can be started) by this process
    now. ``queue`` is this process's :class:`~loopx.store.writer_queue.WriterQueue` of ``db``,
    for a pass that must catch up inside it. Called after leaving the queue."""
    from loopx.store.writer_queue import claim_checkpointer

    _reap()
    fd = claim_checkpointer(f"{db}-lock")
    if fd is None:  # one runs
        return
    try:
        if not _spawn(db, sidecars, fd):
            settle(db, sidecars, queue)
    finally:
        os.close(fd)  # the child holds the lock through its own copy


def _spawn(db: str, sidecars, fd: int) -> bool:
    """Start the checkpointer with ``fd`` (the locked lock file) as its descriptor 3."""
    import fcntl

    if not sys.executable:
        return False
    keep = []
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        keep.append(null)
        # Sources above the targets, so that no dup2 overwrites a source not yet used.
        null_hi = fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, 10)
        keep.append(null_hi)
        fd_hi = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        keep.append(fd_hi)
        actions = [(os.POSIX_SPAWN_DUP2, null_hi, 0), (os.POSIX_SPAWN_DUP2, null_hi, 1),
                   (os.POSIX_SPAWN_DUP2, null_hi, 2), (os.POSIX_SPAWN_DUP2, fd_hi, 3)]
        # This file, with -P: neither the working directory nor this file's directory goes first
        # on sys.path (the writer may be the broker, working in an agent's directory: a loopx/
        # planted there would run with the user's authority); main() puts the loopx this file
        # belongs to there, so the checkpointer runs the writer's own code, installed or not.
        # -S: no site-packages (it needs only the standard library and its own loopx): ~10 ms less.
        # -I (which holds -P): no PYTHON* variable either (loopx.sandbox.selfrun: how LoopX starts itself);
        # main() then leaves the writer's directory for LoopX's own.
        argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), f"--catch-up={CATCH_UP_PAGES}",
                os.path.abspath(db), *map(os.path.abspath, sidecars)]
        # An environment of its own: the writer's may name a run (LOOPX_RUN_ID, whose processes
        # must all end with it) or hold credentials, and it needs none of that.
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEPT}
        pid = os.posix_spawn(sys.executable, argv, env, file_actions=actions, setsid=True)
    except (OSError, AttributeError, NotImplementedError):  # no posix_spawn (Windows), no executable
        return False
    finally:
        for k in keep:
            os.close(k)
    _CHILDREN.append(pid)
    return True


def _reap() -> None:
    for pid in list(_CHILDREN):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _CHILDREN.remove(pid)


def _checkpoint(conn: sqlite3.Connection):
    """``(busy, frames in the WAL, frames copied)`` of one PASSIVE checkpoint, None on an error
    (the next pass catches up: a failed checkpoint loses nothing)."""
    try:
        return conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    except sqlite3.Error:
        return None


def settle(db: str, sidecars=(), queue=None, catch_up: int | None = None) -> bool:
    """One pass: a PASSIVE checkpoint of ``db`` and each of ``sidecars``; again inside the
    writers' ``queue`` when the WAL was left at ``catch_up`` frames or more (default
    :data:`CATCH_UP_PAGES`; see the module's docstring). False when ``db`` is gone."""
    catch_up = CATCH_UP_PAGES if catch_up is None else catch_up
    if not os.path.exists(db):
        return False
    conns = []
    try:
        for i, path in enumerate((db, *sidecars)):
            # No WAL (or no index of it): nothing to copy, and opening the database would make
            # the files again - in a directory that may be being removed (a demo's, a test's).
            if not (os.path.exists(f"{path}-wal") and os.path.exists(f"{path}-shm")):
                continue
            try:
                # mode=rw: a file moved or deleted meanwhile is never made again, empty.
                conn = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, isolation_level=None, timeout=2)
            except sqlite3.Error:
                continue
            conns.append((conn, catch_up if i == 0 else catch_up // 4))
        long = False
        for conn, limit in conns:
            row = _checkpoint(conn)
            long = long or (row is not None and row[1] >= limit)
        if long and queue is not None:
            queue.enter()
            try:
                for conn, _ in conns:
                    _checkpoint(conn)
            finally:
                queue.leave()
    finally:
        for conn, _ in conns:
            conn.close()
    return True


def run(db: str, sidecars, fd: int, catch_up: int | None = None) -> None:
    """The checkpointer's loop (``fd``: the lock file, its byte held)."""
    from loopx.store.writer_queue import WriterQueue, tickets_at

    queue = WriterQueue(fd)
    done = seen = tickets_at(fd)
    if not settle(db, sidecars, queue, catch_up):
        return
    quiet = time.monotonic()
    while True:
        time.sleep(POLL)
        taken, now = tickets_at(fd), time.monotonic()
        if taken != seen:
            seen, quiet = taken, now
        if taken - done >= EVERY:
            done = taken
            if not settle(db, sidecars, queue, catch_up):
                return
        elif now - quiet >= IDLE:
            if taken != done:
                settle(db, sidecars, queue, catch_up)
            return


def main(argv: list[str]) -> int:
    """``python -S -P loopx/store/checkpointer.py [--catch-up=PAGES] DB [SIDECAR...]``, started by
    :func:`request` with the lock file, its byte held, as descriptor 3 (and the starting
    process's :data:`CATCH_UP_PAGES`); run by hand, it takes the lock itself (and exits at once
    if a checkpointer runs)."""
    from loopx.store.writer_queue import claim_checkpointer

    catch_up = None
    if argv and argv[0].startswith("--catch-up="):
        catch_up = int(argv[0].split("=", 1)[1])
        argv = argv[1:]
    if not argv:
        print("usage: python -P loopx/store/checkpointer.py [--catch-up=PAGES] DB [SIDECAR...]", file=sys.stderr)
        return 2
    db, sidecars = argv[0], argv[1:]
    fd = 3
    try:
        mine = os.fstat(fd)
        lock = os.stat(f"{db}-lock")
        handed = (mine.st_dev, mine.st_ino) == (lock.st_dev, lock.st_ino)
    except OSError:
        handed = False
    if handed:
        os.closerange(4, 1 << 16)  # nothing the starting process left inheritable is kept open
    else:
        fd = claim_checkpointer(f"{db}-lock")
        if fd is None:
            return 0
    run(db, sidecars, fd, catch_up)
    return 0


if __name__ == "__main__":
    try:
        # SCHED_BATCH: the same share of the CPU, but its wake-ups (every POLL, each fsync's end)
        # never preempt a running writer - the one holding the queue, say. (Set here: glibc's
        # posix_spawn accepts only FIFO, RR and OTHER.)
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused: an ordinary process
        pass
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    os.chdir("/")  # loopx.sandbox.selfrun.CWD: the paths it is given are absolute
    sys.exit(main(sys.argv[1:]))

"""A first-come, first-served queue for the processes writing one SQLite registry.

SQLite lets one writer in at a time; its busy handler makes the others poll with sleeps that grow
to 100 ms, and a plain exclusive ``flock`` is not fair either: when the holder lets go, the
kernel wakes a waiter, but a process that writes again at once usually takes the lock back
before the woken one has run (on a loaded machine, many times in a row), so some writers wait
for dozens of writes. This queue serves writers in the order they arrived:

- the sidecar file ``registry.db-lock`` holds a ticket counter (its first 8 bytes);
- a writer takes the next ticket ``t`` under a short lock on byte 0, and before letting go of
  it locks its own *slot* (one byte, ``SLOTS_AT + t % SLOTS``), which it holds until its write
  is over;
- it then waits on the slot of ticket ``t - 1``: the lock is granted the moment that writer
  finishes (or dies: the kernel drops a dead process's locks), and only that one waiter is woken;
- byte ``CHECKPOINTER_AT`` (8) is held by the registry's checkpointer while it runs
  (:mod:`loopx.store.checkpointer`), so that at most one runs.

The locks are Linux open-file-description locks (``F_OFD_SETLKW``): byte ranges, owned by the
open file (two stores in one process queue like two processes), released on close and on exit,
so ``kill -9`` never wedges the queue. Where they do not exist, an exclusive ``flock`` of the same
file serves (fair as the kernel makes it). Either way the queue only orders writers: ``BEGIN
IMMEDIATE`` (with SQLite's busy timeout) still guarantees one writer at a time, also against
processes that do not queue (the ``sqlite3`` shell, an older LoopX).
"""

from __future__ import annotations

import os
import struct

#: Where the slot bytes start in the lock file, and how many there are. More writers than slots
#: waiting at once would share slots (still correct: only the order could suffer).
SLOTS_AT = 16
SLOTS = 1 << 16
CHECKPOINTER_AT = 8


class WriterQueue:
    """The queue of one open lock file: ``enter()`` before ``BEGIN IMMEDIATE``, ``leave()`` after."""

    def __init__(self, fd: int):
        import fcntl

        self._fd, self._fcntl = fd, fcntl
        self._ofd = getattr(fcntl, "F_OFD_SETLKW", None)
        self._slot: int | None = None

    def _lock(self, kind: int, start: int) -> None:
        # struct flock {short l_type, l_whence; off_t l_start, l_len; pid_t l_pid} (l_pid 0 for OFD locks).
        self._fcntl.fcntl(self._fd, self._ofd, struct.pack("hhqqi4x", kind, os.SEEK_SET, start, 1, 0))

    @property
    def tickets(self) -> bool:
        """Whether writers are numbered (the fair queue; not the ``flock`` fallback)."""
        return self._ofd is not None

    def enter(self) -> int | None:
        """Wait until every writer that arrived earlier has finished; return this writer's
        ticket (writers are numbered 0, 1, 2... across processes), None with ``flock``."""
        fcntl = self._fcntl
        if self._ofd is None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            return None
        self._lock(fcntl.F_WRLCK, 0)
        try:
            raw = os.pread(self._fd, 8, 0)
            ticket = int.from_bytes(raw, "little") if len(raw) == 8 else 0
            os.pwrite(self._fd, (ticket + 1).to_bytes(8, "little"), 0)
            self._slot = SLOTS_AT + ticket % SLOTS
            self._lock(fcntl.F_WRLCK, self._slot)
        finally:
            self._lock(fcntl.F_UNLCK, 0)
        before = SLOTS_AT + (ticket - 1) % SLOTS
        try:
            self._lock(fcntl.F_WRLCK, before)  # granted when the writer ahead has left
            self._lock(fcntl.F_UNLCK, before)
        except BaseException:  # interrupted while queueing: give up the place
            self.leave()
            raise
        return ticket

    def leave(self) -> None:
        """Let the next writer in."""
        if self._ofd is None:
            self._fcntl.flock(self._fd, self._fcntl.LOCK_UN)
            return
        if self._slot is not None:
            self._lock(self._fcntl.F_UNLCK, self._slot)
            self._slot = None


def tickets_taken(path: str) -> int:
    """How many writers have ever queued on the lock file ``path`` (0 if it does not exist)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
    except FileNotFoundError:
        return 0
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def tickets_at(fd: int) -> int:
    """:func:`tickets_taken` of the lock file open as ``fd`` (read without a lock: a reader only
    polls it)."""
    raw = os.pread(fd, 8, 0)
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def claim_checkpointer(path: str) -> int | None:
    """A new descriptor of the lock file ``path`` (close-on-exec) holding the checkpointer's byte
    locked, or None when another process holds it (a checkpointer runs) or it cannot be had (no
    open-file-description locks). Closing every copy of the descriptor lets the byte go (so does
    the holder's death): a descriptor handed to a child process keeps it held for the child."""
    import fcntl

    if getattr(fcntl, "F_OFD_SETLK", None) is None:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, CHECKPOINTER_AT, 1, 0))
    except OSError:  # held: a checkpointer runs
        os.close(fd)
        return None
    return fd

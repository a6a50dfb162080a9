"""The rollback anchor: what this user last committed to a registry, kept beside its key.

``<key dir>/<registry id>.anchor`` is a small SQLite file (mode 0600) holding, per goal, the
sequence number and keyed hash of the newest event this user's LoopX committed, and the highest
event id it committed (the registry's generation). It is updated after each committed write,
outside the registry's transaction, with a monotonic upsert: concurrent writers (in any order,
from any process) only move it forward, and a crash between the registry's commit and the
anchor's leaves the anchor behind the registry, which is accepted. A registry *behind* its
anchor - a goal whose newest event is older than the anchored one, an anchored event whose hash
differs, or a highest event id below the anchored one - was replaced by an older copy (or had its
newest events removed): :mod:`loopx.ledger.integrity` reports ``registry_rolled_back``.

A writer of an SQLite registry moves the anchor right after its commit while it still holds the
writers' queue (:meth:`loopx.store.sqlite.SqliteStore.write`'s ``then``), so writers of one
registry never meet here. Writers that can (PostgreSQL clients of one user, a copy) take turns
on an exclusive ``flock`` of ``<registry id>.anchor-lock`` before SQLite's write lock: a writer
that finds another's anchor write in progress sleeps in the kernel and is woken the moment it
ends. Without it SQLite's busy handler makes the loser poll with sleeps that grow to 100 ms -
10-25 ms added to a write that itself takes about 1 ms, whenever two writers finish together.
The SQLite lock (and its busy timeout) still guarantees one writer at a time, also against a
process that does not take the ``flock`` (an older LoopX, a platform without ``fcntl``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import contextmanager

from loopx.ledger import keys
from loopx.store.queries import integrity as queries

_CONNS: dict[str, sqlite3.Connection] = {}
#: The open ``-lock`` file of each open anchor (closed with its connection); None: none to be had.
_LOCKS: dict[str, int | None] = {}
_THREADS = threading.Lock()
# Open anchors kept per process, newest last. A process serves one registry or a few; one that
# opens many (a test session, a tool walking registries) must not keep 3 descriptors for each
# forever, so the least recently used is closed past this many.
_KEEP = 8


def path(registry_id: str):
    """The anchor file of ``registry_id``."""
    return keys.key_dir() / f"{registry_id}.anchor"


_PATHS: dict[tuple, str] = {}


def _where(registry_id: str) -> str:
    """:func:`path` as text, remembered per key directory (asked twice by every write)."""
    d = keys.key_dir()
    found = _PATHS.get((d, registry_id))
    if found is None:
        if len(_PATHS) >= 64:
            _PATHS.clear()
        found = _PATHS[(d, registry_id)] = str(d / f"{registry_id}.anchor")
    return found


def lock_path(registry_id: str):
    """The file whose ``flock`` the writers of ``registry_id``'s anchor take turns on."""
    return keys.key_dir() / f"{registry_id}.anchor-lock"


def _close(key: str) -> None:
    _CONNS.pop(key).close()
    _DEFERRED.discard(key)
    fd = _LOCKS.pop(key, None)
    if fd is not None:
        os.close(fd)


@contextmanager
def _turn(registry_id: str, key: str):
    """Hold the anchor's writers' ``flock`` (opened once per anchor per process) for one write;
    threads of one process share its connection and the lock's file, so they take turns first."""
    with _THREADS:
        yield from _flocked(registry_id, key)


def _flocked(registry_id: str, key: str):
    if key not in _LOCKS:
        try:
            import fcntl  # noqa: F401 - none on Windows: SQLite's busy handler alone serves

            _LOCKS[key] = os.open(lock_path(registry_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except (ImportError, OSError):
            _LOCKS[key] = None
    fd = _LOCKS[key]
    if fd is None:
        yield
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _conn(registry_id: str, *, create: bool) -> sqlite3.Connection | None:
    where = _where(registry_id)
    conn = _CONNS.pop(where, None)
    if conn is not None:
        _CONNS[where] = conn  # now the most recently used
        return conn
    p = path(registry_id)
    if not p.exists():
        if not create:
            return None
        keys.private_dir()
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
    conn = sqlite3.connect(p, isolation_level=None, timeout=30, check_same_thread=False)
    queries.anchor_open(conn, create=create)
    while len(_CONNS) >= _KEEP:
        _close(next(iter(_CONNS)))
    _CONNS[where] = conn
    return conn


#: Anchors whose connection has SQLite's automatic checkpoint held back (see :func:`record`).
_DEFERRED: set[str] = set()
_IN_QUEUE_PAGES = 16384


def record(registry_id: str, goal_id: str, seq: int, head_hash: str, event_id: int, *,
           in_queue: bool = False) -> str:
    """Move the anchor forward to ``goal_id``'s event ``seq`` (hash ``head_hash``) and the
    registry's generation to ``event_id`` - never backward; returns the anchor file's path.

    ``in_queue``: the caller holds an SQLite registry's writers' queue, whose checkpointer
    checkpoints this file with the registry (``SqliteStore.write``'s ``then``,
    :mod:`loopx.store.checkpointer`). SQLite's automatic checkpoint of the anchor's WAL (page
    copy + 2 fsyncs, every ~1,000 pages: one write in a few hundred) ran inside this commit, so
    inside the registry's queue, holding every writer behind it (up to 6 ms measured); with
    ``in_queue`` it waits for 16,384 pages, which the checkpointer never lets the WAL reach: a
    safety net for an anchor no checkpointer covers (another user's, writing the same registry)."""
    where = _where(registry_id)
    conn = _conn(registry_id, create=True)
    if in_queue != (where in _DEFERRED):
        queries.anchor_autocheckpoint(conn, _IN_QUEUE_PAGES if in_queue else 1000)
        (_DEFERRED.add if in_queue else _DEFERRED.discard)(where)
    with _turn(registry_id, where):
        queries.anchor_record(conn, goal_id, seq, head_hash, event_id)
    return where


def read(registry_id: str, goal_id: str) -> tuple[dict | None, int | None]:
    """``(anchored head {"seq", "hash"} of goal_id or None, anchored generation or None)``."""
    conn = _conn(registry_id, create=False)
    if conn is None:
        return None, None
    try:
        head = queries.anchor_head(conn, goal_id)
        gen = queries.anchor_generation(conn)
    except sqlite3.OperationalError:  # created by a process that has not made its tables yet
        return None, None
    return ({"seq": head[0], "hash": head[1]} if head else None), (gen[0] if gen else None)


def read_head(registry_id: str, goal_id: str) -> dict | None:
    """The anchored head ``{"seq", "hash"}`` of ``goal_id`` or None (one statement: what a
    write's rollback check needs, without the generation)."""
    conn = _conn(registry_id, create=False)
    if conn is None:
        return None
    try:
        head = queries.anchor_head(conn, goal_id)
    except sqlite3.OperationalError:  # created by a process that has not made its tables yet
        return None
    return {"seq": head[0], "hash": head[1]} if head else None


def heads(registry_id: str) -> tuple[list[dict], int | None]:
    """Every anchored goal head ``{"goal_id", "seq", "hash"}`` and the anchored generation."""
    conn = _conn(registry_id, create=False)
    if conn is None:
        return [], None
    try:
        rows = queries.anchor_heads(conn)
        gen = queries.anchor_generation(conn)
    except sqlite3.OperationalError:
        return [], None
    return [{"goal_id": g, "seq": s, "hash": h} for g, s, h in rows], (gen[0] if gen else None)


def reset(registry_id: str, current: list[dict], generation: int) -> None:
    """Replace the anchor with the registry as it stands now (``registry reanchor`` / ``rekey``):
    ``current`` is every goal's newest event ``{"goal_id", "seq", "hash"}``."""
    conn = _conn(registry_id, create=True)
    with _turn(registry_id, _where(registry_id)):
        queries.anchor_reset(conn, current, generation)

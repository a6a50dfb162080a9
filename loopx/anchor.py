"""The rollback anchor: what this user last committed to a registry, kept beside its key.

``<key dir>/<registry id>.anchor`` is a small SQLite file (mode 0600) holding, per goal, the
sequence number and keyed hash of the newest event this user's LoopX committed, and the highest
event id it committed (the registry's generation). It is updated after each committed write,
outside the registry's transaction, with a monotonic upsert: concurrent writers (in any order,
from any process) only move it forward, and a crash between the registry's commit and the
anchor's leaves the anchor behind the registry, which is accepted. A registry *behind* its
anchor - a goal whose newest event is older than the anchored one, an anchored event whose hash
differs, or a highest event id below the anchored one - was replaced by an older copy (or had its
newest events removed): :mod:`loopx.integrity` reports ``registry_rolled_back``.
"""

from __future__ import annotations

import os
import sqlite3

from loopx import keys

_CONNS: dict[str, sqlite3.Connection] = {}
# Open anchors kept per process, newest last. A process serves one registry or a few; one that
# opens many (a test session, a tool walking registries) must not keep 3 descriptors for each
# forever, so the least recently used is closed past this many.
_KEEP = 8
_SCHEMA = ("CREATE TABLE IF NOT EXISTS heads (goal_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL)",
           "CREATE TABLE IF NOT EXISTS generation (one INTEGER PRIMARY KEY CHECK (one = 0), event_id INTEGER NOT NULL)")


def path(registry_id: str):
    """The anchor file of ``registry_id``."""
    return keys.key_dir() / f"{registry_id}.anchor"


def _conn(registry_id: str, *, create: bool) -> sqlite3.Connection | None:
    p = path(registry_id)
    conn = _CONNS.pop(str(p), None)
    if conn is not None:
        _CONNS[str(p)] = conn  # now the most recently used
        return conn
    if not p.exists():
        if not create:
            return None
        keys._private_dir()
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
    conn = sqlite3.connect(p, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 30000")
    if create:
        for sql in _SCHEMA:
            conn.execute(sql)
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")  # a lost update leaves the anchor behind: accepted
    while len(_CONNS) >= _KEEP:
        _CONNS.pop(next(iter(_CONNS))).close()
    _CONNS[str(p)] = conn
    return conn


def record(registry_id: str, goal_id: str, seq: int, head_hash: str, event_id: int) -> None:
    """Move the anchor forward to ``goal_id``'s event ``seq`` (hash ``head_hash``) and the
    registry's generation to ``event_id`` - never backward."""
    conn = _conn(registry_id, create=True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO heads (goal_id, seq, hash) VALUES (?, ?, ?) ON CONFLICT (goal_id) DO UPDATE"
                     " SET seq = excluded.seq, hash = excluded.hash WHERE excluded.seq > heads.seq",
                     (goal_id, seq, head_hash))
        conn.execute("INSERT INTO generation (one, event_id) VALUES (0, ?) ON CONFLICT (one) DO UPDATE"
                     " SET event_id = excluded.event_id WHERE excluded.event_id > generation.event_id",
                     (event_id,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def read(registry_id: str, goal_id: str) -> tuple[dict | None, int | None]:
    """``(anchored head {"seq", "hash"} of goal_id or None, anchored generation or None)``."""
    conn = _conn(registry_id, create=False)
    if conn is None:
        return None, None
    try:
        head = conn.execute("SELECT seq, hash FROM heads WHERE goal_id = ?", (goal_id,)).fetchone()
        gen = conn.execute("SELECT event_id FROM generation").fetchone()
    except sqlite3.OperationalError:  # created by a process that has not made its tables yet
        return None, None
    return ({"seq": head[0], "hash": head[1]} if head else None), (gen[0] if gen else None)


def heads(registry_id: str) -> tuple[list[dict], int | None]:
    """Every anchored goal head ``{"goal_id", "seq", "hash"}`` and the anchored generation."""
    conn = _conn(registry_id, create=False)
    if conn is None:
        return [], None
    try:
        rows = conn.execute("SELECT goal_id, seq, hash FROM heads ORDER BY goal_id").fetchall()
        gen = conn.execute("SELECT event_id FROM generation").fetchone()
    except sqlite3.OperationalError:
        return [], None
    return [{"goal_id": g, "seq": s, "hash": h} for g, s, h in rows], (gen[0] if gen else None)


def reset(registry_id: str, current: list[dict], generation: int) -> None:
    """Replace the anchor with the registry as it stands now (``registry reanchor`` / ``rekey``):
    ``current`` is every goal's newest event ``{"goal_id", "seq", "hash"}``."""
    conn = _conn(registry_id, create=True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM heads")
        conn.execute("DELETE FROM generation")
        conn.executemany("INSERT INTO heads (goal_id, seq, hash) VALUES (?, ?, ?)",
                         [(r["goal_id"], r["seq"], r["hash"]) for r in current])
        conn.execute("INSERT INTO generation (one, event_id) VALUES (0, ?)", (generation,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise

"""The embedded default store: one SQLite file, WAL mode, serialised writers.

Writers take the database lock up front (``BEGIN IMMEDIATE``) so a transaction never has to
upgrade a read lock and deadlock. Before that, a writer queues on an exclusive ``flock`` of a
sidecar file (``registry.db-lock``): the kernel wakes a waiter the moment the holder lets go, so
concurrent writing processes wait about as long as the writes ahead of them take. SQLite's own
busy handler, which is what stands in for a queue without it, polls with sleeps that grow to
100 ms and lets a newcomer overtake a process that has been waiting for a while; it remains
only as the fallback (a writer that cannot open the sidecar, an older LoopX, the sqlite3 shell),
with a generous timeout so such writers still queue instead of failing. Readers never take the
lock: WAL lets them read while one process writes. A read-only store opens the file with ``mode=ro``: SQLite itself refuses
every write, which is what the status server relies on.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

from loopx.errors import LoopxError
from loopx.store import schema

BUSY_TIMEOUT_MS = 60_000


def path_from_url(url: str) -> Path:
    """``sqlite:///abs/path.db`` or a plain path -> a filesystem path."""
    if url.startswith("sqlite:"):
        parsed = urlparse(url)
        return Path(unquote(parsed.netloc + parsed.path))
    return Path(url)


class SqliteTx:
    """A transaction on one SQLite connection."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def execute(self, sql, params=()):
        return self._conn.execute(sql, params).rowcount

    def executemany(self, sql, rows):
        return self._conn.executemany(sql, rows).rowcount

    def query(self, sql, params=()):
        cur = self._conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def one(self, sql, params=()):
        cur = self._conn.execute(sql, params)
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row))

    def lock_goal(self, goal_id):
        # BEGIN IMMEDIATE already holds the whole database against other writers.
        return self.one("SELECT * FROM goals WHERE id = ?", (goal_id,))


class SqliteStore:
    """A registry in one SQLite file."""

    dialect = "sqlite"

    def __init__(self, url: str, readonly: bool = False):
        self.url = url
        self.readonly = readonly
        self.path = path_from_url(url)
        # One connection per store; threads sharing a store (the status server) take turns.
        self._lock = threading.RLock()
        self._queue_fd: int | None = None  # the sidecar lock file, opened at the first write
        self._conn = self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            if not self.path.exists():
                raise LoopxError("registry_unavailable", f"no registry at {self.path}")
            conn = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > schema.CURRENT_VERSION:
                raise LoopxError("schema_too_new", f"registry schema {version} is newer than this LoopX")
            return conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise LoopxError("registry_unavailable", f"cannot open registry {self.path}: {exc}") from None
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < schema.CURRENT_VERSION:
            self._migrate(conn)
        elif version > schema.CURRENT_VERSION:
            raise LoopxError("schema_too_new", f"registry schema {version} is newer than this LoopX")
        # NORMAL is durable against a killed process in WAL mode; only an OS crash can lose the
        # last commits, and never corrupts the file.
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # Switching to WAL needs a moment alone with the file; concurrent first openers retry.
        for attempt in range(200):
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:
                time.sleep(0.01 + attempt * 0.002)
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for step in schema.statements("sqlite", version):
                step(SqliteTx(conn)) if callable(step) else conn.execute(step)
            conn.execute(f"PRAGMA user_version = {schema.CURRENT_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def read(self):
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield SqliteTx(conn)
            finally:
                conn.execute("ROLLBACK")

    def write(self, work):
        if self.readonly:
            raise LoopxError("registry_readonly", "this registry was opened read-only")
        with self._lock:
            queue = self._writer_queue()
            if queue is not None:
                queue.flock(self._queue_fd, queue.LOCK_EX)
            try:
                conn = self._conn
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = work(SqliteTx(conn))
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return result
            finally:
                if queue is not None:
                    queue.flock(self._queue_fd, queue.LOCK_UN)

    def _writer_queue(self):
        """The ``fcntl`` module with ``self._queue_fd`` open on the sidecar lock file, or None
        (in-memory registries, platforms without ``flock``, a directory we cannot write)."""
        if self._queue_fd is None:
            if str(self.path) == ":memory:":
                self._queue_fd = -1
            else:
                try:
                    import fcntl  # noqa: F401 - probed here: Windows has none

                    self._queue_fd = os.open(f"{self.path}-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except (ImportError, OSError):
                    self._queue_fd = -1
        if self._queue_fd < 0:
            return None
        import fcntl

        return fcntl

    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def integrity_check(self) -> list[str]:
        rows = self._conn.execute("PRAGMA integrity_check").fetchall()
        return [] if rows == [("ok",)] else [r[0] for r in rows]

    def data_version(self) -> int:
        """A number that changes whenever another connection commits (for cheap polling)."""
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        self._conn.close()
        if self._queue_fd is not None and self._queue_fd >= 0:
            os.close(self._queue_fd)
            self._queue_fd = None


def default_path() -> Path:
    """The embedded registry's default file, in the platformdirs user data directory."""
    import platformdirs

    return Path(platformdirs.user_data_dir("loopx", appauthor=False)) / "registry.db"


def open_sqlite(url: str, readonly: bool = False) -> SqliteStore:
    """Factory registered for the ``sqlite`` scheme and for plain paths."""
    return SqliteStore(url, readonly=readonly)



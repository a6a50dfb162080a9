"""The embedded default store: one SQLite file, WAL mode, serialised writers.

Writers take the database lock up front (``BEGIN IMMEDIATE``) so a transaction never has to
upgrade a read lock and deadlock. Before that, a writer takes its place in a first-come,
first-served queue kept on a sidecar file (``registry.db-lock``, see
:mod:`loopx.store.writer_queue`): it is woken the moment the writer ahead of it finishes, so
concurrent writing processes wait about as long as the writes ahead of them take, in arrival
order. SQLite's own busy handler, which is what stands in for a queue without it, polls with
sleeps that grow to 100 ms and lets a newcomer overtake a process that has been waiting for a
while; it remains only as the fallback (a writer that cannot open the sidecar, an older LoopX,
the sqlite3 shell), with a generous timeout so such writers still queue instead of failing.
Readers never queue: WAL lets them read while one process writes. A read-only store opens the
file with ``mode=ro``: SQLite itself refuses every write, which is what the status server
relies on.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from loopx.values.errors import LoopxError
from loopx.store import checkpointer, schema

BUSY_TIMEOUT_MS = 60_000
#: SQLite checkpoints the WAL (copies its pages into the database file, with an fsync) inside the
#: commit that takes it past 1,000 pages - while that writer holds the queue, so every writer
#: behind it waits for the disk (a few ms, tens under load). Queued writers leave that to a
#: checkpointer process (:mod:`loopx.store.checkpointer`): the writer of every
#: CHECKPOINT_EVERY-th ticket (or of a transaction that changed more than CHECKPOINT_CHANGES rows)
#: starts one after it has let the next writer in, if none runs, for the registry and the SQLite
#: files its ``then`` wrote in the queue (the rollback anchor).
CHECKPOINT_EVERY = checkpointer.EVERY
CHECKPOINT_CHANGES = 2000


def path_from_url(url: str) -> Path:
    """``sqlite:///abs/path.db`` or a plain path -> a filesystem path."""
    if url.startswith("sqlite:"):
        parsed = urlparse(url)
        return Path(unquote(parsed.netloc + parsed.path))
    return Path(url)


#: The goal's row, and the registry's id with it (what every write reads next: loopx.ledger.keys.stored_id).
_LOCK_GOAL = ("SELECT g.*, (SELECT value FROM meta WHERE key = 'registry_id') AS _loopx_registry_id"
              " FROM goals g WHERE g.id = ?")


def _with_registry_id(tx, row):
    """The goal's row without the registry's id, which is kept on ``tx`` for :func:`loopx.ledger.keys.stored_id`."""
    if row is None:
        return None
    tx._loopx_locked_id = (row.pop("_loopx_registry_id"),)
    return row


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

    def tuples(self, sql, params=()):
        """Column names and the rows as plain tuples (for hashing many rows cheaply)."""
        cur = self._conn.execute(sql, params)
        return [d[0] for d in cur.description], cur.fetchall()

    def one(self, sql, params=()):
        cur = self._conn.execute(sql, params)
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row))

    def lock_goal(self, goal_id):
        # BEGIN IMMEDIATE already holds the whole database against other writers.
        return _with_registry_id(self, self.one(_LOCK_GOAL, (goal_id,)))


#: The migrated empty in-memory registry :meth:`SqliteStore.scratch` copies, and the process that
#: made it (made at first use; a forked child makes its own: SQLite connections do not cross a fork).
_SCRATCH_TEMPLATE: tuple[int, sqlite3.Connection] | None = None
_SCRATCH_LOCK = threading.Lock()


class SqliteStore:
    """A registry in one SQLite file."""

    dialect = "sqlite"
    missing = False  # the file is made when the store opens
    holds_all_on_write = True  # BEGIN IMMEDIATE

    def __init__(self, url: str, readonly: bool = False, *, _blank: bool = False):
        self.url = url
        self.readonly = readonly
        self.path = path_from_url(url)
        # One connection per store; threads sharing a store (the status server) take turns.
        self._lock = threading.RLock()
        self._readonly_file = False
        self._queue_fd: int | None = None  # the sidecar lock file, opened at the first write
        self._queue = None  # its WriterQueue (False: none can be had)
        #: SQLite files written inside the queue by ``then`` (the rollback anchor), checkpointed
        #: with the registry (their own automatic checkpoint would run in the queue).
        self._sidecars: list[str] = []
        self._behind: int | None = None  # the schema version of a file read without migrating it
        self._conn = self._connect(_blank)

    @classmethod
    def scratch(cls) -> "SqliteStore":
        """An empty in-memory registry to replay events into and throw away (loopx.ledger.log.replay).

        A copy of one migrated once per process: migrating costs about 0.1 s of CPU, a copy about a
        millisecond, and a self-repair check or a test's invariant replays every goal. The copies
        share the template's ``meta`` (its registry id): a scratch is read, never keyed or kept."""
        return cls(":memory:", _blank=True)

    def _connect(self, blank: bool = False) -> sqlite3.Connection:
        if blank:
            global _SCRATCH_TEMPLATE
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            with _SCRATCH_LOCK:
                if _SCRATCH_TEMPLATE is None or _SCRATCH_TEMPLATE[0] != os.getpid():
                    template = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                    self._migrate(template)
                    _SCRATCH_TEMPLATE = (os.getpid(), template)
                _SCRATCH_TEMPLATE[1].backup(conn)
            return conn
        if str(self.path) == ":memory:":
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._migrate(conn)
            return conn
        exists = self.path.exists()
        if self.readonly and not exists:
            raise LoopxError("registry_not_found", f"no registry at {self.path}")
        # A file this process may not write is opened read-only, so that reading it still works
        # and a write is refused with registry_readonly rather than failing half-way.
        ro = self.readonly or (exists and not os.access(self.path, os.W_OK))
        # On a read-only file system nobody can change the file, and SQLite could not even make
        # the WAL's shared-memory file to read it: read it as the immutable file it is.
        # Only without a pending WAL: an immutable open would not see the commits still in it.
        frozen = exists and _on_readonly_fs(self.path) and not _wal_pending(self.path)
        ro = ro or frozen
        try:
            if ro:
                conn = sqlite3.connect(f"file:{quote(str(self.path))}?mode=ro" + ("&immutable=1" if frozen else ""),
                                       uri=True, isolation_level=None, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            from loopx.store.space import NO_SPACE, disk_full, sqlite_out_of_space

            if getattr(exc, "errno", None) in NO_SPACE or isinstance(exc, sqlite3.Error) and sqlite_out_of_space(
                    exc, self.path):
                raise disk_full(f"registry {self.path}", str(exc)) from None
            raise LoopxError("registry_unavailable", f"cannot open registry {self.path}: {exc}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = self._identify(conn)
            if ro:
                self._readonly_file = "read-only file system" if frozen else not self.readonly
                # Read as it is (read-only cannot migrate): readers that depend on a later
                # schema's tables check the transaction's ``schema_version``.
                self._behind = version if version < schema.CURRENT_VERSION else None
            elif version < schema.CURRENT_VERSION:
                self._migrate(conn)
            # NORMAL is durable against a killed process in WAL mode; only an OS crash can lose
            # the last commits, and never corrupts the file.
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            conn.close()
            raise storage_error(exc, self.path) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _identify(self, conn: sqlite3.Connection) -> int:
        """The file's schema version, after making sure it is a LoopX registry we can use.

        Nothing here writes: a file that is not a LoopX registry is refused *before* any table
        is created or the journal mode is switched, so another application's database is never
        touched.
        """
        # Both reads in one snapshot: a first opener creating the schema at this moment commits
        # its tables and its version together, and reading them apart could see the tables
        # without the version, taking a registry being made for another application's file.
        conn.execute("BEGIN")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            if conn.in_transaction:  # SQLite ends it itself on some errors (a full disk)
                conn.execute("ROLLBACK")
        if version == 0:
            if tables:
                raise LoopxError("registry_invalid", f"{self.path} is an SQLite database of another application"
                                 " (not a LoopX registry); LoopX leaves it untouched")
            return 0
        if not {"meta", "events", "goals"} <= tables:
            raise LoopxError("registry_invalid", f"{self.path} is an SQLite database but not a LoopX registry"
                             " (no ledger tables); LoopX leaves it untouched")
        if version > schema.CURRENT_VERSION:
            raise LoopxError("registry_newer", f"registry {self.path} has schema {version}, newer than this"
                             f" LoopX's {schema.CURRENT_VERSION}: upgrade LoopX to use it")
        return version

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
            try:
                conn.execute("BEGIN")
                try:
                    tx = SqliteTx(conn)
                    if self._behind is not None:
                        tx.schema_version = self._behind
                    yield tx
                finally:
                    conn.execute("ROLLBACK")
            except sqlite3.DatabaseError as exc:
                raise storage_error(exc, self.path) from None

    def write(self, work, *, then=None):
        """Run ``work(tx)`` in one write transaction (see :class:`loopx.store.base.Store`);
        ``then()``, when given, runs after the commit while this writer still holds the writers'
        queue: what it records beside the registry (the rollback anchor) is in place before the
        next writer reads it, and it never waits on a lock of its own behind other writers. What
        ``then()`` returns, when it is a path, names an SQLite file it wrote with its automatic
        checkpoint held back (see :meth:`checkpoints_by_ticket`): whoever checkpoints the registry
        checkpoints it too."""
        if self.readonly:
            raise LoopxError("registry_readonly", "this registry was opened read-only")
        if self._readonly_file == "read-only file system":
            raise LoopxError("registry_readonly", f"registry {self.path} is on a read-only file system;"
                             " reading works, writing needs it mounted read-write")
        if self._readonly_file:
            raise LoopxError("registry_readonly", f"registry {self.path} is read-only (file permissions);"
                             " reading works, writing needs write permission on it and its directory")
        with self._lock:
            queue = self._writer_queue()
            ticket = queue.enter() if queue is not None else None
            checkpoint = False
            try:
                conn = self._conn
                changes = conn.total_changes
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = work(SqliteTx(conn))
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                if then is not None:
                    sidecar = then()
                    if isinstance(sidecar, str) and sidecar not in self._sidecars:
                        self._sidecars.append(sidecar)  # checkpointed with the registry
                checkpoint = ticket is not None and (
                    (ticket + 1) % CHECKPOINT_EVERY == 0 or conn.total_changes - changes > CHECKPOINT_CHANGES)
                return result
            except sqlite3.DatabaseError as exc:
                raise storage_error(exc, self.path) from None
            finally:
                if queue is not None:
                    queue.leave()
                if checkpoint:
                    checkpointer.request(str(self.path), self._sidecars, queue)

    def checkpoints_by_ticket(self) -> bool:
        """Whether this store's writers checkpoint by ticket after leaving the queue (and so also
        the files ``write``'s ``then`` names): false without a numbered queue (in-memory
        registries, no ``fcntl``), where SQLite's automatic checkpoints stay on."""
        queue = self._writer_queue()
        return queue is not None and queue.tickets

    def _writer_queue(self):
        """The :class:`~loopx.store.writer_queue.WriterQueue` on the sidecar lock file, or None
        (in-memory registries, platforms without ``fcntl``, a directory we cannot write)."""
        if self._queue is None:
            self._queue = False
            if str(self.path) != ":memory:":
                try:
                    from loopx.store.writer_queue import WriterQueue

                    self._queue_fd = os.open(f"{self.path}-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    self._queue = WriterQueue(self._queue_fd)
                    if self._queue.tickets:  # the checkpointer's; SQLite's own only as a safety net
                        self._conn.execute(f"PRAGMA wal_autocheckpoint = {checkpointer.SAFETY_PAGES}")
                except (ImportError, OSError):  # Windows has no fcntl
                    pass
        return self._queue or None

    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def integrity_check(self, loss_kinds: tuple[str, ...] = ()) -> list[str]:
        rows = self._conn.execute("PRAGMA integrity_check").fetchall()
        return [] if rows == [("ok",)] else [r[0] for r in rows]

    def data_version(self) -> int:
        """A number that changes whenever another connection commits (for cheap polling)."""
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        self._conn.close()
        if self._queue_fd is not None:
            os.close(self._queue_fd)
            self._queue_fd, self._queue = None, None


def storage_error(exc: sqlite3.Error, path) -> LoopxError:
    """A LoopxError for what SQLite said about a file (one line, a stable code).

    Integrity errors are bugs, not damage, and are re-raised as they are.
    """
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        raise exc
    text = str(exc)
    if "not a database" in text:
        return LoopxError("registry_invalid", f"{path} is not a LoopX registry (not an SQLite database);"
                          " LoopX leaves it untouched")
    if "malformed" in text or "corrupt" in text or isinstance(exc, sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.OperationalError):
        return LoopxError("registry_corrupt", f"registry {path} is damaged ({text}); a repair cannot rebuild a"
                          " damaged file: restore a backup (a repair saves one next to it, FILE.bak-TIME, before"
                          f" it writes) or salvage it with `sqlite3 {path} .recover`")
    from loopx.store.space import disk_full, sqlite_out_of_space

    if sqlite_out_of_space(exc, path):
        return disk_full(f"registry {path}", text)
    if "readonly" in text or "read-only" in text:
        return LoopxError("registry_readonly", f"registry {path} is read-only ({text})")
    if "locked" in text or "busy" in text:
        return LoopxError("registry_unavailable", f"registry {path} stayed locked by another writer ({text});"
                          " try again")
    return LoopxError("registry_unavailable", f"registry {path}: {text}")


def _wal_pending(path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False


def _on_readonly_fs(path) -> bool:
    """Whether ``path`` lies on a file system mounted read-only."""
    try:
        return bool(os.statvfs(Path(path).parent).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows): SQLite's own errors say it
        return False


def default_path() -> Path:
    """The embedded registry's default file, in the platformdirs user data directory."""
    from loopx.values import userdirs

    return Path(userdirs.data_dir()) / "registry.db"


def open_sqlite(url: str, readonly: bool = False) -> SqliteStore:
    """Factory registered for the ``sqlite`` scheme and for plain paths."""
    return SqliteStore(url, readonly=readonly)



"""The team store: a registry in a PostgreSQL database, shared by agents on many machines.

Concurrency is the database's. Every write transaction runs at ``REPEATABLE READ`` and takes
the goal's row with ``SELECT ... FOR UPDATE`` (:meth:`PostgresTx.lock_goal`), so writers of one
goal queue on that row and writers of different goals never wait for each other. Because a
repeatable-read transaction keeps the snapshot it started with, a writer that had to wait for
the row sees that the goal changed under it and PostgreSQL refuses it with a serialization
failure; :meth:`PostgresStore.write` then runs the whole ``work`` again on a fresh snapshot. The
same retry covers deadlocks and the race of two requests with one ``--operation-id`` (a unique
violation on ``operations``): the retry finds the first request's result. See ``docs/postgres.md``.

A read-only store sets ``default_transaction_read_only`` on its session: the server refuses
every write, which is what the status server relies on. Every committed write notifies the
channel ``loopx.<schema>``; :meth:`PostgresStore.data_version` turns those notifications into
a number that changes on every commit, for cheap change polling.

psycopg is imported here, and this module is imported only when a ``postgresql://`` URL is used.
psycopg's package imports all of itself (async connections, every type adapter, libpq wrapper)
however little a command uses, so ``import psycopg`` is this backend's start-up floor
(``docs/performance.md`` measures it); this module adds nothing more at import: ``hashlib``
(OpenSSL) and ``random`` are loaded only by the rare paths that use them.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from functools import lru_cache

import psycopg
from psycopg import errors as pgerrors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.numeric import NumericLoader

from loopx.values.errors import LoopxError
from loopx.store import schema

#: How long a writer waits for a goal another writer holds, and keeps retrying conflicts,
#: before giving up (the same patience as the SQLite store's busy timeout).
LOCK_TIMEOUT_S = 60
RETRY_BUDGET_S = 60.0
CONNECT_TIMEOUT_S = 10
VERSION_KEY = "schema_version"
_RETRYABLE = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)
# A unique violation on these tables is a race with a concurrent writer, not a bug: the retry
# sees the winner's row (the first result of an --operation-id, the goal's next seq).
_RACE_TABLES = {"operations", "events"}


@lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s``; a literal ``%`` becomes ``%%``.

    A ``?`` inside a quoted string or identifier is left alone.
    """
    out = []
    quote = None
    for ch in sql:
        if quote:
            if ch == quote:
                quote = None
            out.append("%%" if ch == "%" else ch)
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


def _params(params) -> tuple:
    # SQLite stores a bool as 0/1; PostgreSQL would refuse a boolean for an INTEGER column.
    if any(isinstance(p, bool) for p in params):
        return tuple(int(p) if isinstance(p, bool) else p for p in params)
    return tuple(params)


class _NumberLoader(NumericLoader):
    """``numeric`` (what ``sum()`` of a BIGINT gives) as int or float, as SQLite returns it."""

    def load(self, data):
        value = super().load(data)
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return float(value)


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    from loopx.store import display_url

    return display_url(url)


def redact_text(text: str, url: str) -> str:
    """A message (which may quote libpq's or the server's words) without ``url``'s passwords."""
    from loopx.store import redact_text as scrub

    return scrub(text, url)


class PostgresTx:
    """One transaction on a PostgreSQL connection."""

    dialect = "postgres"

    def __init__(self, conn: psycopg.Connection):
        self._conn = conn

    def execute(self, sql, params=()):
        return self._conn.execute(translate(sql), _params(params)).rowcount

    def executemany(self, sql, rows):
        with self._conn.cursor() as cur:
            cur.executemany(translate(sql), [_params(r) for r in rows])
            return cur.rowcount

    def query(self, sql, params=()):
        return self._conn.execute(translate(sql), _params(params)).fetchall()

    def one(self, sql, params=()):
        return self._conn.execute(translate(sql), _params(params)).fetchone()

    def lock_goal(self, goal_id):
        # The registry's id comes with the goal's row (loopx.ledger.keys.stored_id reads it from there).
        row = self.one("SELECT g.*, (SELECT value FROM meta WHERE key = 'registry_id') AS _loopx_registry_id"
                       " FROM goals g WHERE g.id = ? FOR UPDATE", (goal_id,))
        if row is None:
            return None
        self._loopx_locked_id = (row.pop("_loopx_registry_id"),)
        return row


class PostgresStore:
    """A registry in a PostgreSQL database (or in the schema its ``search_path`` names)."""

    dialect = "postgres"
    path = None  # a server database, no file of ours
    missing = False  # the schema is made when the store opens
    holds_all_on_write = False  # row locks; the first read fixes the snapshot

    def __init__(self, url: str, readonly: bool = False):
        self.url = url
        self.readonly = readonly
        # One connection serves one transaction at a time; a threaded reader (the status
        # server) must not interleave two transactions on it.
        self._lock = threading.RLock()
        self._listening = False
        self._version_counter = 0
        self._conn = self._connect()
        try:
            # The schema's name and whether it holds a registry, in one statement.
            found = self._conn.execute(
                "SELECT current_schema() AS s, EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                " ON n.oid = c.relnamespace WHERE c.relname = 'meta' AND n.nspname = current_schema()) AS e").fetchone()
            self._channel = "loopx." + (found["s"] or "")
            self._ensure_schema(found["e"])
        except BaseException:
            self._conn.close()
            raise

    # -- connection and schema -------------------------------------------------------------

    def _conninfo(self) -> str:
        try:
            params = conninfo_to_dict(self.url)
        except psycopg.ProgrammingError as exc:
            raise LoopxError("registry_unavailable",
                             redact_text(f"bad PostgreSQL URL {redact(self.url)}: {exc}", self.url)) from None
        params.setdefault("connect_timeout", str(CONNECT_TIMEOUT_S))
        params.setdefault("application_name", "loopx")
        options = [params.get("options") or "", f"-c lock_timeout={LOCK_TIMEOUT_S}s"]
        if self.readonly:
            # The server itself refuses writes in every transaction of this session.
            options.append("-c default_transaction_read_only=on")
        params["options"] = " ".join(o for o in options if o)
        return make_conninfo(**params)

    def _connect(self) -> psycopg.Connection:
        try:
            conn = psycopg.connect(self._conninfo(), autocommit=True, row_factory=dict_row)
        except psycopg.Error as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise LoopxError("registry_unavailable",
                             redact_text(f"cannot connect to {redact(self.url)}: {message}", self.url)) from None
        conn.adapters.register_loader("numeric", _NumberLoader)
        if self.readonly:
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        return conn

    def _stored_version(self, exists: bool | None = None) -> int | None:
        # Ask the catalog with a query, not to_regclass(): a plain scan uses a fresh snapshot,
        # where a name lookup may answer from a cache that predates a concurrent migration.
        # (``exists``: that answer, when the caller asked it already.)
        if exists is None:
            exists = self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                " ON n.oid = c.relnamespace WHERE c.relname = 'meta' AND n.nspname = current_schema()) AS e"
            ).fetchone()["e"]
        if not exists:
            return None
        row = self._conn.execute("SELECT value FROM meta WHERE key = %s", (VERSION_KEY,)).fetchone()
        return int(row["value"]) if row else 0

    def _ensure_schema(self, exists: bool | None = None) -> None:
        version = self._stored_version(exists)
        if version == schema.CURRENT_VERSION:
            return
        if version is not None and version > schema.CURRENT_VERSION:
            raise LoopxError("registry_newer", f"registry schema {version} is newer than this LoopX's"
                             f" {schema.CURRENT_VERSION}: upgrade LoopX to use it")
        if self.readonly:
            what = "no LoopX registry" if version is None else f"registry schema {version} needs migrating"
            raise LoopxError("registry_unavailable", f"{what} at {redact(self.url)} (open it read-write once)")
        self._migrate()

    def _migrate(self) -> None:
        conn = self._conn
        # Concurrent first openers queue on an advisory lock; the loser finds the work done.
        import hashlib

        key = int.from_bytes(hashlib.sha256(self._channel.encode()).digest()[:8], "big", signed=True)
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                version = self._stored_version() or 0
                if version >= schema.CURRENT_VERSION:
                    return
                for step in schema.statements("postgres", version):
                    step(PostgresTx(conn)) if callable(step) else conn.execute(step)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (VERSION_KEY, str(schema.CURRENT_VERSION)),
                )
        except pgerrors.InvalidSchemaName:
            raise LoopxError(
                "registry_unavailable",
                f"{redact(self.url)}: the search_path names no existing schema to create the registry in",
            ) from None
        except pgerrors.InsufficientPrivilege as exc:
            raise LoopxError("registry_unavailable",
                             redact_text(f"cannot create the registry tables: {exc}", self.url)) from None

    def _ready(self) -> psycopg.Connection:
        # A server restart breaks the connection; reconnect before a new transaction (never
        # in the middle of one: whether it committed would be unknown).
        if self._conn.closed or self._conn.broken:
            self._conn = self._connect()
            if self._listening:
                # Commits while we were away sent notifications nobody heard: report a change.
                self._listening = False
                self._version_counter += 1
        return self._conn

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def read(self):
        with self._lock:
            conn = self._ready()
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            except psycopg.OperationalError as exc:
                raise self._unavailable(exc) from None
            try:
                yield PostgresTx(conn)
            except pgerrors.ReadOnlySqlTransaction:
                raise LoopxError("registry_readonly", "a read transaction cannot write") from None
            finally:
                if not conn.broken:
                    conn.execute("ROLLBACK")

    def write(self, work, *, then=None):
        """Run ``work(tx)`` in one write transaction (see :class:`loopx.store.base.Store`),
        again on a fresh snapshot after a conflict; ``then()``, when given, runs after the
        commit (there is no writers' queue to hold here)."""
        result = self._commit(work)
        if then is not None:
            then()
        return result

    def checkpoints_by_ticket(self) -> bool:
        """Nothing here checkpoints SQLite files (see :meth:`loopx.store.base.Store.checkpoints_by_ticket`)."""
        return False

    def _commit(self, work):
        if self.readonly:
            raise LoopxError("registry_readonly", "this registry was opened read-only")
        deadline = time.monotonic() + RETRY_BUDGET_S
        attempt = 0
        with self._lock:
            while True:
                attempt += 1
                conn = self._ready()
                try:
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    try:
                        result = work(PostgresTx(conn))
                        conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
                    except BaseException:
                        if not conn.broken:
                            conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
                    return result
                except _RETRYABLE as exc:
                    self._backoff(attempt, deadline, exc)
                except pgerrors.UniqueViolation as exc:
                    if exc.diag.table_name not in _RACE_TABLES:
                        raise
                    self._backoff(attempt, deadline, exc)
                except pgerrors.LockNotAvailable:
                    raise LoopxError(
                        "registry_unavailable",
                        f"another writer held the goal for over {LOCK_TIMEOUT_S}s; try again",
                    ) from None
                except pgerrors.ReadOnlySqlTransaction:
                    raise LoopxError("registry_readonly", "the database refused a write (read-only)") from None
                except psycopg.OperationalError as exc:
                    raise self._unavailable(exc) from None

    @staticmethod
    def _backoff(attempt: int, deadline: float, exc: Exception) -> None:
        if time.monotonic() >= deadline:
            raise LoopxError(
                "registry_unavailable", f"gave up after {attempt} conflicting attempts: {exc}".strip()
            ) from None
        # Jittered exponential backoff: concurrent losers must not collide again in lockstep.
        import random

        time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 8))))

    def _unavailable(self, exc: Exception) -> LoopxError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if getattr(exc, "sqlstate", None) == "53100":  # disk_full, on the server
            from loopx.store.space import disk_full

            return disk_full(f"PostgreSQL at {redact(self.url)}", redact_text(first, self.url))
        return LoopxError("registry_unavailable", redact_text(f"PostgreSQL at {redact(self.url)}: {first}", self.url))

    # -- inspection ------------------------------------------------------------------------

    def schema_version(self) -> int:
        """The schema version recorded in the ``meta`` table."""
        with self._lock:
            self._ready()
            return self._stored_version() or 0

    def integrity_check(self, loss_kinds: tuple[str, ...] = ()) -> list[str]:
        """Problems PostgreSQL can find: schema version, missing tables, invalid indexes,
        gaps in a goal's ledger (but those an event of ``loss_kinds`` recorded as lost), and
        goals whose revision is not their last event."""
        problems = []
        with self.read() as tx:
            version = self._stored_version()
            if version != schema.CURRENT_VERSION:
                problems.append(f"schema version is {version}, expected {schema.CURRENT_VERSION}")
            tables = ["meta", "events", "operations", *schema.GOAL_TABLES]
            missing = [t for t in tables if not tx.one("SELECT to_regclass(?) IS NOT NULL AS e", (t,))["e"]]
            problems += [f"table {t} is missing" for t in missing]
            if missing:
                return problems
            for row in tx.query(
                "SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = ANY (SELECT to_regclass(t) FROM unnest(?::text[]) AS t)"
                " AND NOT (i.indisvalid AND i.indisready)",
                (tables,),
            ):
                problems.append(f"index {row['name']} is not valid")
            for row in tx.query(
                # A gap a repair already recorded (its event lists the "lost" numbers) is
                # known loss, reported by the ledger_gap detector if it grows.
                "SELECT goal_id, count(*) AS n, min(seq) AS first, max(seq) AS last FROM events e"
                " WHERE NOT EXISTS (SELECT 1 FROM events r WHERE r.goal_id = e.goal_id"
                " AND r.kind = ANY (?::text[]) AND r.body LIKE '%\"lost\":[%'"
                " AND r.body NOT LIKE '%\"lost\":[]%')"
                " GROUP BY goal_id HAVING count(*) <> max(seq) OR min(seq) <> 1", (list(loss_kinds),)
            ):
                problems.append(
                    f"goal {row['goal_id']}: ledger has {row['n']} events numbered {row['first']}..{row['last']}"
                )
            for row in tx.query(
                "SELECT g.id, g.revision, e.last FROM goals g LEFT JOIN"
                " (SELECT goal_id, max(seq) AS last FROM events GROUP BY goal_id) e ON e.goal_id = g.id"
                " WHERE e.last IS NULL OR e.last <> g.revision"
            ):
                problems.append(f"goal {row['id']}: revision {row['revision']} but last event {row['last']}")
        return problems

    def data_version(self) -> int:
        """A number that changes whenever a write commits to this registry (cheap polling).

        The first call starts listening; later calls count the notifications that arrived.
        Unlike ``max(events.id)``, this never misses a commit whose ids were allocated early.
        """
        with self._lock:
            conn = self._ready()
            if not self._listening:
                conn.execute(f'LISTEN "{self._channel}"')
                self._listening = True
            self._version_counter += sum(1 for _ in conn.notifies(timeout=0))
            return self._version_counter

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a commit; True if one happened (call
        :meth:`data_version` once first to start listening)."""
        with self._lock:
            conn = self._ready()
            if not self._listening:
                self.data_version()
            seen = sum(1 for _ in conn.notifies(timeout=timeout, stop_after=1))
            self._version_counter += seen
            return seen > 0

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


def open_postgres(url: str, readonly: bool = False) -> PostgresStore:
    """Factory registered for the ``postgresql`` and ``postgres`` schemes."""
    return PostgresStore(url, readonly=readonly)

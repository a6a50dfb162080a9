"""Which storage backends the suite runs on, and how a test gets a fresh registry on each.

SQLite always runs. PostgreSQL runs against ``LOOPX_TEST_POSTGRES_URL`` when a contributor
sets it (a server of their own; nothing is started then), else against a throwaway server the
first PostgreSQL test starts for the session (``tests/pg_server.py``), stopped and deleted when
the session ends. Without server binaries the PostgreSQL tests are skipped, saying why, unless
``LOOPX_TEST_REQUIRE_POSTGRES=1`` (CI) turns that into a failure.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest

POSTGRES_ENV = "LOOPX_TEST_POSTGRES_URL"
REQUIRE_ENV = "LOOPX_TEST_REQUIRE_POSTGRES"
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def fresh_registry(kind: str, tmp_path, template: "SqliteTemplate | None" = None) -> str:
    """A URL of a new, empty registry of ``kind`` (SQLite: a copy of ``template`` when given)."""
    if kind == "sqlite" and template is not None:
        return template.copy_to(tmp_path / "registry.db")
    if kind == "sqlite":
        # Created now: read commands refuse a registry path that does not exist (registry_not_found).
        from loopx.ledger.registry import Registry

        path = str(tmp_path / "registry.db")
        Registry.open(path).close()
        return path
    base = postgres_base_url()
    schema_name = f"t_{uuid.uuid4().hex[:16]}"
    with _admin(base) as conn:
        conn.execute(f"CREATE SCHEMA {schema_name}")
    return with_schema(base, schema_name)


class SqliteTemplate:
    """An SQLite registry made once by :class:`loopx.ledger.registry.Registry` (in a directory and
    key directory of its own, filled by ``fill(reg)`` when given), copied for each test that asks.

    Making a registry costs about 20 ms of CPU (its schema, triggers, key and MACs), copying one
    about 1 ms, and the ``registry_url`` fixture makes one for most tests; a filled one costs what
    filling it costs. A copy is that registry byte for byte, with the template's id: its key file
    and rollback anchor are put in the test's own key directory and its location remembered there,
    as making it there would have done. Copies share an id, so a test that needs two registries
    makes the second itself.
    """

    def __init__(self, where, fill=None):
        self.where = where
        self.fill = fill
        self.filled = None  # what ``fill`` returned
        self._made: tuple | None = None  # (the file, its registry id, {key-directory file name: bytes})

    def _make(self) -> tuple:
        import sqlite3

        from loopx.ledger import keys
        from loopx.ledger.registry import Registry

        path = self.where / "registry.db"
        saved = os.environ.get("XDG_CONFIG_HOME")
        os.environ["XDG_CONFIG_HOME"] = str(self.where / "config")
        try:
            with Registry.open(str(path)) as reg:
                self.filled = self.fill(reg) if self.fill else None
            conn = sqlite3.connect(path)
            try:
                rid = conn.execute("SELECT value FROM meta WHERE key = ?", (keys.META_ID,)).fetchone()[0]
            finally:
                conn.close()
            # The files are copied byte for byte, so every committed page must be in them, not in a
            # WAL: the registry's checkpointer process (loopx/store/checkpointer.py) may still hold
            # it open after the fill, and then closing this process's connections leaves the WAL.
            _checkpointed(path)
            anchor = keys.key_dir() / f"{rid}.anchor"
            if anchor.exists():
                _checkpointed(anchor)
            # The key and the anchor; not the location record, which names the template's file.
            kept = {f.name: f.read_bytes() for f in keys.key_dir().iterdir()
                    if f.is_file() and f.name.startswith(rid) and not f.name.endswith(("-wal", "-shm"))}
        finally:
            if saved is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = saved
        return path, rid, kept

    def copy_to(self, path) -> str:
        """Put a copy of the template at ``path`` (its key and anchor in the current key directory)
        -> its URL."""
        import shutil

        from loopx.ledger import keys

        if self._made is None:
            self._made = self._make()
        source, rid, kept = self._made
        shutil.copyfile(source, path)
        d = keys.private_dir()
        for name, data in kept.items():
            fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        keys.remember_location(keys.sqlite_location(path), rid)
        return str(path)


def _checkpointed(path) -> None:
    """Move every page of ``path``'s WAL into the file itself and empty the WAL (waiting out a
    checkpointer or reader that holds it), so that a copy of the file alone is the whole database."""
    import sqlite3
    import time

    conn = sqlite3.connect(path, timeout=30)
    try:
        deadline = time.monotonic() + 30
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] != 0:  # 1: busy, try again
            if time.monotonic() > deadline:
                raise AssertionError(f"{path}: its WAL could not be checkpointed in 30 s")
            time.sleep(0.01)
    finally:
        conn.close()


def drop_registry(kind: str, url: str) -> None:
    """Remove what :func:`fresh_registry` made (SQLite files go with tmp_path)."""
    if kind != "postgres":
        return
    schema_name = schema_of(url)
    if schema_name:
        with _admin(postgres_base_url()) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema_name} CASCADE")


# Each PostgreSQL test gets a schema of its own in the one test database, named by the URL's
# search_path (libpq's ``options=-csearch_path=...``). Creating and dropping a schema takes
# milliseconds, where a database per test would take a second, and real processes given the
# URL land in the same schema.
_reachable: dict[str, str | None] = {}
_server = None  # the session's ThrowawayPostgres, once started
_unavailable: str | None = None  # why it could not be started


def _skip(reason: str):
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: PostgreSQL tests must run)", pytrace=False)
    pytest.skip(reason)


def postgres_base_url() -> str:
    """The URL of the session's PostgreSQL test database; skip the test, saying why, if there is none.

    ``LOOPX_TEST_POSTGRES_URL`` when set; else a throwaway server, started on first use and
    exported in ``LOOPX_TEST_POSTGRES_URL`` so processes the tests start see it too.
    """
    global _server, _unavailable
    from tests.tiers import refuse_in_quick_tier

    refuse_in_quick_tier("postgres", "PostgreSQL")
    if _server is None and not os.environ.get(POSTGRES_ENV) and _unavailable is None:
        from tests.pg_server import ServerUnavailable, ThrowawayPostgres

        server = ThrowawayPostgres()
        try:
            os.environ[POSTGRES_ENV] = server.start()
            _server = server
        except ServerUnavailable as exc:
            _unavailable = str(exc)
        except Exception as exc:  # a broken start is reported on every PostgreSQL test, not raised once
            _unavailable = f"the throwaway server did not start: {type(exc).__name__}: {exc}"
    if _unavailable is not None:
        _skip(f"PostgreSQL tests skipped: {_unavailable} (or set {POSTGRES_ENV} to a server of yours)")
    base = os.environ[POSTGRES_ENV]
    if base not in _reachable:
        try:
            with _admin(base) as conn:
                conn.execute("SELECT 1")
            _reachable[base] = None
        except Exception as exc:  # any failure to connect means: skip, and say why
            _reachable[base] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if _reachable[base] is not None:
        _skip(f"PostgreSQL tests skipped: {POSTGRES_ENV} is not reachable ({_reachable[base]})")
    return base


def stop_server() -> None:
    """Stop and delete the throwaway server, if this session started one (conftest: session end)."""
    global _server
    server, _server = _server, None
    if server is not None:
        if os.environ.get(POSTGRES_ENV) == server.url:
            del os.environ[POSTGRES_ENV]
        server.stop()


def _admin(base: str):
    import psycopg

    return psycopg.connect(base, autocommit=True, connect_timeout=10)


def with_schema(base: str, schema_name: str) -> str:
    """``base`` with its ``search_path`` set to ``schema_name``."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema_name}"


def schema_of(url: str) -> str | None:
    """The test schema a :func:`with_schema` URL names."""
    found = re.search(r"search_path%3D(t_[0-9a-f]+)", url)
    return found.group(1) if found else None

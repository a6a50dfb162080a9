"""Which storage backends the suite runs on, and how a test gets a fresh registry on each.

SQLite always runs. PostgreSQL runs when ``LOOPX_TEST_POSTGRES_URL`` names a reachable server
(``.ci/run`` starts one); otherwise its tests are skipped with that reason.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest

POSTGRES_ENV = "LOOPX_TEST_POSTGRES_URL"
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def fresh_registry(kind: str, tmp_path) -> str:
    """A URL of a new, empty registry of ``kind``."""
    if kind == "sqlite":
        # Created now: read commands refuse a registry path that does not exist (registry_not_found).
        from loopx.registry import Registry

        path = str(tmp_path / "registry.db")
        Registry.open(path).close()
        return path
    base = postgres_base_url()
    schema_name = f"t_{uuid.uuid4().hex[:16]}"
    with _admin(base) as conn:
        conn.execute(f"CREATE SCHEMA {schema_name}")
    return with_schema(base, schema_name)


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


def postgres_base_url() -> str:
    """``LOOPX_TEST_POSTGRES_URL`` if it names a reachable server; else skip the test, saying why."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"PostgreSQL tests skipped: set {POSTGRES_ENV} to run them (scripts/postgres.sh starts a server)")
    if base not in _reachable:
        try:
            with _admin(base) as conn:
                conn.execute("SELECT 1")
            _reachable[base] = None
        except Exception as exc:  # any failure to connect means: skip, and say why
            _reachable[base] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if _reachable[base] is not None:
        pytest.skip(f"PostgreSQL tests skipped: {POSTGRES_ENV} is not reachable ({_reachable[base]})")
    return base


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

"""Which storage backends the suite runs on, and how a test gets a fresh registry on each.

SQLite always runs. PostgreSQL runs when ``LOOPX_TEST_POSTGRES_URL`` names a reachable server
(``.ci/run`` starts one); otherwise its tests are skipped with that reason.
"""

from __future__ import annotations

import os

import pytest

POSTGRES_ENV = "LOOPX_TEST_POSTGRES_URL"
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def fresh_registry(kind: str, tmp_path) -> str:
    """A URL of a new, empty registry of ``kind``."""
    if kind == "sqlite":
        return str(tmp_path / "registry.db")
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"PostgreSQL tests skipped: set {POSTGRES_ENV} to run them")
    raise NotImplementedError("PostgreSQL backend not built yet")


def drop_registry(kind: str, url: str) -> None:
    """Remove what :func:`fresh_registry` made (SQLite files go with tmp_path)."""

"""PostgreSQL commands load no more than the driver: the turn-time path imports nothing it does not use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import loopx_env


@pytest.mark.parametrize("registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_should_run_on_postgres_loads_no_openssl(registry_url, loopx):
    goal = loopx("project_prompt", "create", "--title", "fast", "--json").json["id"]
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", "quota", "should-run",
                        "--goal-id", goal, "--json"], env=loopx_env(registry_url), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "psycopg" in imported  # it did run on PostgreSQL
    # hashlib loads OpenSSL (milliseconds); only a schema migration or an --operation-id needs it.
    assert "hashlib" not in imported and "_hashlib" not in imported

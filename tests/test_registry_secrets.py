"""A PostgreSQL URL's password never reaches the screen: ``registry info``, ``registry copy``
and every error show it as ``***`` (in the userinfo or as ``?password=``). And ``registry
init`` works on an empty PostgreSQL database."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import pytest

from loopx.store import display_url
from tests import backends
from tests.conftest import loopx_env

SECRET = "hunter2-Secr3t"
# Nothing listens on port 1: every connection is refused, quickly.
DEAD = [f"postgresql://loopx:{SECRET}@127.0.0.1:1/db?connect_timeout=2",
        f"postgresql://loopx@127.0.0.1:1/db?password={SECRET}&connect_timeout=2",
        f"postgresql://127.0.0.1:1/db?connect_timeout=2&user=loopx&Password={SECRET}"]


def _loopx(*args, env=None):
    p = subprocess.run([sys.executable, "-m", "loopx", *args], env=loopx_env("/nonexistent.db", **(env or {})),
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def _inproc(*args, env=None):
    """The CLI in-process (fast): exit code and everything printed."""
    from click.testing import CliRunner

    from loopx.cli import cli

    r = CliRunner().invoke(cli, list(args), env={"LOOPX_REGISTRY": "/nonexistent.db", **(env or {})})
    return r.exit_code, r.stdout + r.stderr


def test_display_url_hides_every_form_of_password():
    for url in DEAD + [f"host=127.0.0.1 dbname=db password='{SECRET}' connect_timeout=2"]:
        assert SECRET not in display_url(url) and "***" in display_url(url), url
    assert display_url("/tmp/plain.db") == "/tmp/plain.db"


@pytest.mark.parametrize("url", DEAD, ids=["userinfo", "query", "query-case"])
@pytest.mark.parametrize("cmd", [("registry", "info"), ("project-prompt", "list"), ("status",)])
def test_errors_about_a_registry_never_print_its_password(url, cmd):
    for fmt in ((), ("--json",)):
        code, out = _inproc("--registry", url, *cmd, *fmt)
        assert code == 2 and "registry_unavailable" in out, out
        assert SECRET not in out, out
        code, out = _inproc(*cmd, *fmt, env={"LOOPX_REGISTRY": url})
        assert code == 2 and SECRET not in out, out


@pytest.mark.parametrize("url", DEAD, ids=["userinfo", "query", "query-case"])
def test_registry_copy_errors_never_print_either_password(tmp_path, url):
    src = str(tmp_path / "src.db")
    assert _inproc("--registry", src, "project-prompt", "create", "--title", "t")[0] == 0
    for args in (("--from", src, "--to", url), ("--from", url, "--to", str(tmp_path / "dst.db"))):
        code, out = _inproc("registry", "copy", *args)
        assert code == 2 and SECRET not in out, out


def _query_password_url(base: str, schema: str | None = None) -> tuple[str, str]:
    """``base`` (postgresql://user:pw@host:port/db) with its password moved into ``?password=``."""
    m = re.fullmatch(r"postgresql://([^:]+):([^@]+)@(.+)", base)
    if not m:
        pytest.skip("the test server's URL has no password in it")
    user, password, rest = m.groups()
    url = f"postgresql://{user}@{rest}?password={password}"
    return (backends.with_schema(url, schema) if schema else url), password


@pytest.mark.postgres
def test_registry_info_and_copy_on_a_real_server_show_the_url_without_its_password(tmp_path):
    base = backends.postgres_base_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with backends._admin(base) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        url, password = _query_password_url(base, schema)
        src = str(tmp_path / "src.db")
        assert _loopx("--registry", src, "project-prompt", "create", "--title", "t")[0] == 0
        code, out = _loopx("registry", "copy", "--from", src, "--to", url, "--json")
        assert code == 0 and password not in out and "password=***" in out, out
        code, out = _loopx("--registry", url, "registry", "info", "--json")
        assert code == 0 and password not in out, out
        assert json.loads(out)["goals"] == 1 and "password=***" in json.loads(out)["url"]
        code, out = _loopx("--registry", url, "registry", "info")
        assert code == 0 and password not in out and "password=***" in out
        wrong = url.replace(f"password={password}", f"password={SECRET}")
        code, out = _loopx("--registry", wrong, "registry", "info")
        assert code == 2 and SECRET not in out and password not in out, out
    finally:
        backends.drop_registry("postgres", backends.with_schema(base, schema))


def _init_works(url):
    code, out = _loopx("--registry", url, "registry", "init", "--json")
    assert code == 0, out
    assert json.loads(out)["created"] is True and json.loads(out)["schema_version"] >= 1
    code, out = _loopx("--registry", url, "registry", "init", "--json")
    assert code == 0 and json.loads(out)["created"] is False, out
    code, out = _loopx("--registry", url, "project-prompt", "create", "--title", "on PostgreSQL", "--json")
    assert code == 0, out


@pytest.mark.postgres
def test_registry_init_on_an_empty_postgresql_schema_creates_the_registry():
    url = backends.fresh_registry("postgres", None)
    try:
        _init_works(url)
    finally:
        backends.drop_registry("postgres", url)


@pytest.mark.postgres
def test_registry_init_on_an_empty_postgresql_database_creates_the_registry():
    import psycopg

    base = backends.postgres_base_url()
    db = f"empty_{uuid.uuid4().hex[:12]}"
    try:
        with backends._admin(base) as conn:
            conn.execute(f"CREATE DATABASE {db} TEMPLATE template0 ENCODING 'UTF8'")
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("the test server's role may not create a database (a server of your own without CREATEDB)")
    url = re.sub(r"/[^/?]+(\?|$)", f"/{db}\\1", base, count=1)
    try:
        _init_works(url)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")

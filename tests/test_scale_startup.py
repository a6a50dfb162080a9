"""PostgreSQL commands load no more than the driver: the turn-time path imports nothing it does not use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import loopx_env
from tests.factories import make_goal


@pytest.mark.parametrize("registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_should_run_on_postgres_loads_no_openssl(registry_url, loopx):
    goal = make_goal(loopx, title="fast")["goal"]
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", "quota", "should-run",
                        "--goal-id", goal, "--json"], env=loopx_env(registry_url), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "psycopg" in imported  # it did run on PostgreSQL
    # hashlib loads OpenSSL (milliseconds); only a schema migration or an --operation-id needs it.
    assert "hashlib" not in imported and "_hashlib" not in imported


def test_status_first_page_does_not_load_cattrs(sqlite_url, tmp_path):
    """The overview's page (counts, lanes, quota pictures, last runs) is built from flat values:
    importing cattrs and generating its converters was a fifth of ``status``'s time at 1,000,000
    goals. The page still shows every field (quota limits, grants, used; the last run)."""
    from loopx import quota
    from loopx.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="paged")["goal"]
        quota.set_limits(reg, "user", goal_id=goal, values={"max_turns": 3})
    turn = subprocess.run([sys.executable, "-m", "loopx", "quota", "should-run", "--goal-id", goal, "--agent", "tester",
                           "--json"], env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=120)
    assert json.loads(turn.stdout)["interaction_contract"]["run_id"], turn.stderr
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", "status", "--json"],
                       env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "loopx.status" in imported
    assert "cattrs" not in imported
    page = json.loads(r.stdout)
    shown = page["goals"][0]
    assert shown["quota"]["limits"]["max_turns"] == 3 and shown["quota"]["used"]["turns"] == 1
    assert shown["last_run"]["agent"] == "tester" and shown["last_run"]["state"] == "open"


def test_a_command_that_needs_no_user_directory_does_not_import_platformdirs(sqlite_url):
    """Every command that loads plugins reads the entry-point cache; finding that cache must not
    import platformdirs (~6 ms: its Unix module imports tempfile). Reading a goal's todos or the
    status page opens no key and writes nothing, so it needs no user directory at all."""
    from loopx.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="read", todo_texts=["t"])["goal"]
    for argv, env in ((["todo", "list", "--goal-id", goal], {}), (["status"], {}),
                      (["todo", "list", "--goal-id", goal], {"LOOPX_PLUGIN_CACHE": "0"})):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", *argv, "--json"],
                           env=loopx_env(sqlite_url, **env), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and json.loads(r.stdout), r.stderr[-2000:]
        imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
        assert "loopx.plugins" in imported  # it did look for plugins
        assert "platformdirs" not in imported, (argv, env)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the rule applied without platformdirs is Linux's")
@pytest.mark.parametrize("xdg", [None, "/somewhere/cache", "relative/cache"])
def test_the_entry_point_cache_stays_where_platformdirs_puts_it(monkeypatch, tmp_path, xdg):
    import platformdirs

    from loopx import plugins

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert plugins._cache_file().parent == Path(platformdirs.user_cache_dir("loopx", appauthor=False))

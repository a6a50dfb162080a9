"""loopx.userdirs answers what platformdirs answers, with or without importing it; and the
integrity key's directory is the one a step may not read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest

from loopx import userdirs
from tests.conftest import loopx_env
from tests.factories import make_goal

HOMES = ["/home/someone", "/home/someone/", "/", "relative/home", "", None]
XDGS = [None, "", "  ", "/somewhere/xdg", "/somewhere/xdg/", "relative/xdg"]


@pytest.mark.parametrize("home", HOMES)
@pytest.mark.parametrize("xdg", XDGS)
@pytest.mark.parametrize("kind", ["config", "cache", "data"])
def test_each_directory_is_where_platformdirs_puts_it(monkeypatch, kind, xdg, home):
    variable = {"config": "XDG_CONFIG_HOME", "cache": "XDG_CACHE_HOME", "data": "XDG_DATA_HOME"}[kind]
    for name, value in ((variable, xdg), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    try:
        expected = getattr(platformdirs, f"user_{kind}_dir")("loopx", appauthor=False)
    except RuntimeError:  # platformdirs finds no home directory: neither may we
        with pytest.raises(RuntimeError):
            getattr(userdirs, f"{kind}_dir")()
        return
    assert getattr(userdirs, f"{kind}_dir")() == expected


def test_the_key_directory_is_inside_the_directory_a_step_may_not_read(monkeypatch, tmp_path):
    from loopx import confine, keys

    for xdg in (None, str(tmp_path / "xdg"), "relative"):
        if xdg is None:
            monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CONFIG_HOME", xdg)
        assert keys.key_dir().parent == Path(confine.config_dir())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the rule applied without platformdirs is Linux's")
def test_should_run_and_a_write_do_not_import_platformdirs(sqlite_url):
    """``quota should-run`` runs before every agent turn and writes (its key is in the config
    directory): platformdirs (~5 ms to import) is not needed to find it."""
    from loopx.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="g", todo_texts=["t"])["goal"]
    for argv in (["quota", "should-run", "--goal-id", goal], ["todo", "add", "--goal-id", goal, "--text", "u"]):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", *argv, "--json"],
                           env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and json.loads(r.stdout), r.stderr[-2000:]
        imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
        assert "loopx.keys" in imported and "loopx.userdirs" in imported
        assert "platformdirs" not in imported, argv

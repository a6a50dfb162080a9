"""loopx.values.userdirs answers what platformdirs answers for "loopx"; and the integrity key's directory
is the one a step may not read."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from loopx.values import userdirs

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
    from loopx.turn import confine
    from loopx.ledger import keys

    for xdg in (None, str(tmp_path / "xdg"), "relative"):
        if xdg is None:
            monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CONFIG_HOME", xdg)
        assert keys.key_dir().parent == Path(confine.config_dir())

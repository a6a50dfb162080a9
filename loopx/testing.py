"""Pytest fixtures for people writing LoopX plugins (installed as the ``loopx`` pytest plugin).

``loopx_registry`` gives each test a fresh embedded registry (and points ``LOOPX_REGISTRY`` at
it, so CLI calls in the test use it too). ``loopx_plugin`` registers a plugin object for the
duration of one test and always unregisters it::

    def test_my_hook(loopx_registry, loopx_plugin):
        loopx_plugin(MyPlugin())
        ...
"""

from __future__ import annotations

import pytest


@pytest.fixture
def loopx_registry(tmp_path, monkeypatch):
    """A fresh, empty SQLite registry; ``LOOPX_REGISTRY`` points at it for the test."""
    from loopx.registry import Registry

    path = tmp_path / "registry.db"
    monkeypatch.setenv("LOOPX_REGISTRY", str(path))
    monkeypatch.delenv("LOOPX_ACTOR", raising=False)
    reg = Registry.open(str(path))
    try:
        yield reg
    finally:
        reg.close()


@pytest.fixture
def loopx_plugin():
    """``register(plugin, name=None)``: add a plugin object for this test only."""
    from loopx.plugins import get_plugin_manager

    pm = get_plugin_manager()
    added = []

    def register(plugin, name=None):
        added.append(pm.register(plugin, name=name))
        pm.check_pending()
        return plugin

    yield register
    for name in added:
        if pm.has_plugin(name):
            pm.unregister(name=name)

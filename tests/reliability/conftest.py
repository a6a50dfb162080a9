"""The reliability suites exercise self-repair too: register the shipped plugin for them.

In-process commands see it through ``loopx_plugin``; real processes get it through
``LOOPX_PLUGINS`` (see :func:`env`).
"""

from __future__ import annotations

import pytest

from tests.conftest import loopx_env

pytest.importorskip("loopx_self_repair", reason="pip install -e ./plugins/self_repair")


@pytest.fixture(autouse=True)
def self_repair_plugin(loopx_plugin):
    import loopx_self_repair.plugin

    loopx_plugin(loopx_self_repair.plugin, name="self_repair")


def env(registry_url: str, **extra) -> dict:
    """``loopx_env`` with the self_repair plugin allowed (real processes)."""
    return loopx_env(registry_url, LOOPX_PLUGINS="self_repair", **extra)

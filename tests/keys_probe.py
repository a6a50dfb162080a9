"""Run by tests/test_registry_keys.py as a pytest session of its own (not collected otherwise):
key-writing work in a module fixture, before any test's own fixtures, and in real processes."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    from loopx.domain import goals
    from loopx.ledger.registry import Registry

    path = tmp_path_factory.mktemp("probe") / "registry.db"
    with Registry.open(str(path)) as reg:
        goals.create(reg, "user", title="probe")
    return path


def test_key_writing_commands(made, tmp_path):
    import os

    env = {"LOOPX_PLUGINS": "", "PATH": "/usr/bin:/bin"}
    env.update({k: v for k, v in os.environ.items() if k in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                                                             "XDG_STATE_HOME", "PYTHONPATH")})
    mine = str(tmp_path / "mine.db")
    for argv in (["--registry", mine, "project-prompt", "create", "--title", "t"],
                 ["registry", "copy", "--from", mine, "--to", str(tmp_path / "copy.db")],
                 ["project-prompt", "create", "--title", "in the default registry"]):
        p = subprocess.run([sys.executable, "-m", "loopx", *argv], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p

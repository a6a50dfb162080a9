"""The plugin seam type-checks: ``mypy --strict`` passes on loopx.api, the hookspecs, the plugin
manager, the hook façade and the example plugin (the files ``[tool.mypy]`` in pyproject.toml
lists), and the types have teeth: a plugin that registers or answers the wrong thing is an error
before it ever runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a cold mypy run takes seconds


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    # No cache written (nothing left in the checkout); the configuration is pyproject.toml's.
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", "/dev/null", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_seam_passes_mypy_strict():
    r = _mypy()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Success: no issues found" in r.stdout
    assert (ROOT / "loopx" / "py.typed").exists()  # what tells a plugin's type checker to read them


def test_a_plugin_that_registers_or_answers_the_wrong_thing_fails_the_check(tmp_path):
    bad = tmp_path / "bad_plugin.py"
    bad.write_text('''\
from __future__ import annotations

from loopx.hookspecs.answers import ContributedAction, Veto
from loopx.plugin_register import ErrorCodeRegistrar, StoreRegistrar


def loopx_register_stores(register: StoreRegistrar) -> None:
    register("bad", 42)


def loopx_register_error_codes(register: ErrorCodeRegistrar) -> None:
    register(code="bad.code", colour="red")


def loopx_contract_veto() -> Veto:
    return Veto(message="no reason given")


def loopx_contract_actions() -> list[ContributedAction]:
    return [ContributedAction(argv="loopx status")]
''')
    r = _mypy("--strict", "--follow-imports", "silent", str(bad))
    out = r.stdout
    assert r.returncode == 1, out
    assert 'bad_plugin.py:8: error: Argument 2 to "__call__" of "StoreRegistrar"' in out, out
    assert 'bad_plugin.py:12: error: Unexpected keyword argument "colour"' in out, out
    assert 'bad_plugin.py:16: error: Missing positional argument "reason"' in out, out
    assert "bad_plugin.py:20: error:" in out, out  # argv is a list of words, not one string

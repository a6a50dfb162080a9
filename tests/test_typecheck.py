"""The plugin seam and the plugins type-check: one ``mypy --strict`` run passes on loopx.api, the
hookspecs, the plugin manager, the hook façade, every plugin of ``plugins/`` and the example
plugin (the files ``[tool.mypy]`` in pyproject.toml lists), and the types have teeth: a plugin
that registers or answers the wrong thing, or misuses what the API hands it, is an error before it
ever runs."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a cold mypy run takes about 6 s of CPU

#: Every plugin package shipped in the repository: each must be in ``[tool.mypy] files``.
PLUGIN_PACKAGES = sorted(init.parent for init in [*ROOT.glob("plugins/*/loopx_*/__init__.py"),
                                                   *ROOT.glob("examples/plugins/*/loopx_*/__init__.py")])


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    """One cache for this module's runs (in pytest's temporary directory, nothing left in the
    checkout): the first run analyses the seam and the core it reads, the others reuse that."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(cache, *args: str) -> subprocess.CompletedProcess[str]:
    # The configuration is pyproject.toml's; the cache is the module's.
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _errors_in(cache, plugin, source: str) -> str:
    """mypy's report on ``plugin`` (a file written with ``source``), checked as a plugin is: it must
    find errors."""
    plugin.write_text(source)
    r = _mypy(cache, "--strict", "--follow-imports", "silent", str(plugin))
    assert r.returncode == 1, r.stdout + r.stderr
    return r.stdout


def test_the_seam_and_every_plugin_pass_mypy_strict(mypy_cache):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True
    checked = {ROOT / f for f in config["files"]}
    assert len(PLUGIN_PACKAGES) >= 4, PLUGIN_PACKAGES  # issue_fix, self_repair, approvals, the example
    assert [p.relative_to(ROOT) for p in PLUGIN_PACKAGES if p not in checked] == []
    r = _mypy(mypy_cache)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Success: no issues found" in r.stdout
    assert (ROOT / "loopx" / "py.typed").exists()  # what tells a plugin's type checker to read them
    # Nothing switched off: no module-wide ignore, no bare "# type: ignore" in a plugin.
    for package in PLUGIN_PACKAGES:
        for path in package.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "# mypy: ignore-errors" not in text and "# type: ignore\n" not in text, path


def test_a_plugin_that_registers_or_answers_the_wrong_thing_fails_the_check(tmp_path, mypy_cache):
    out = _errors_in(mypy_cache, tmp_path / "bad_plugin.py", '''\
from __future__ import annotations

from loopx.seam.hookspecs.answers import ContributedAction, Veto
from loopx.seam.plugin_register import ErrorCodeRegistrar, StoreRegistrar


def loopx_register_stores(register: StoreRegistrar) -> None:
    register("bad", 42)


def loopx_register_error_codes(register: ErrorCodeRegistrar) -> None:
    register(code="bad.code", colour="red")


def loopx_contract_veto() -> Veto:
    return Veto(message="no reason given")


def loopx_contract_actions() -> list[ContributedAction]:
    return [ContributedAction(argv="loopx status")]
''')
    assert 'bad_plugin.py:8: error: Argument 2 to "__call__" of "StoreRegistrar"' in out, out
    assert 'bad_plugin.py:12: error: Unexpected keyword argument "colour"' in out, out
    assert 'bad_plugin.py:16: error: Missing positional argument "reason"' in out, out
    assert "bad_plugin.py:20: error:" in out, out  # argv is a list of words, not one string


def test_what_the_api_hands_a_plugin_is_typed(tmp_path, mypy_cache):
    """The types a plugin names through ``loopx.api`` (``Writer``, ``ReadTx``, ``goals.Goal``,
    ``gates.Gate``, the registrars) catch a plugin that writes as another actor, reads a field a
    goal or gate does not have, writes through a read transaction, or registers a repair event
    kind's apply wrongly; the documented registration (``RepairSession.apply_event``) passes."""
    out = _errors_in(mypy_cache, tmp_path / "misuse_plugin.py", '''\
from __future__ import annotations

from loopx.api import ReadTx, RepairSession, Writer, gates, goals, hookimpl, registrars


def work(w: Writer) -> None:
    w.actor = "user"


def veto(tx: ReadTx, goal: goals.Goal) -> object:
    return goal.name


def blocks(gate: gates.Gate) -> int:
    return gate.blocks


def write(tx: ReadTx) -> None:
    tx.execute("DELETE FROM goals")


@hookimpl
def loopx_register_event_kinds(register: registrars.EventKinds) -> None:
    register("mine.repaired", RepairSession.apply_event, writers=("capability",), guard=RepairSession.guard_event)
    register("mine.noted", lambda: None)
''')
    assert 'misuse_plugin.py:7: error: Property "actor" defined in "Writer" is read-only' in out, out
    assert 'misuse_plugin.py:11: error: "Goal" has no attribute "name"' in out, out
    assert 'misuse_plugin.py:15: error: Incompatible return value type (got "str", expected "int")' in out, out
    assert 'misuse_plugin.py:19: error: "ReadTx" has no attribute "execute"' in out, out
    assert "misuse_plugin.py:24: error" not in out, out  # the repair kind, as docs/plugins.md registers it
    assert 'misuse_plugin.py:25: error: Argument 2 to "__call__" of "EventKindRegistrar"' in out, out
    assert out.count(": error:") == 5, out

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
    assert config["disallow_any_unimported"] is True  # a class mypy cannot import is an error, not Any
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
    kind's apply wrongly; the documented registration (``RepairSession.apply_event``) passes. So do
    the types of what the API answers (``runs.load``'s run, ``state.acting``'s writer)."""
    out = _errors_in(mypy_cache, tmp_path / "misuse_plugin.py", '''\
from __future__ import annotations

from loopx.api import ReadTx, RepairSession, Writer, gates, goals, hookimpl, registrars, runs, state


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


def opened(tx: ReadTx) -> int:
    return runs.load(tx, "run_1").opened_at


def widen(w: Writer) -> None:
    with state.acting(w, "mine") as cw:
        cw.actor = "user"
''')
    assert 'misuse_plugin.py:7: error: Property "actor" defined in "Writer" is read-only' in out, out
    assert 'misuse_plugin.py:11: error: "Goal" has no attribute "name"' in out, out
    assert 'misuse_plugin.py:15: error: Incompatible return value type (got "str", expected "int")' in out, out
    assert 'misuse_plugin.py:19: error: "ReadTx" has no attribute "execute"' in out, out
    assert "misuse_plugin.py:24: error" not in out, out  # the repair kind, as docs/plugins.md registers it
    assert 'misuse_plugin.py:25: error: Argument 2 to "__call__" of "EventKindRegistrar"' in out, out
    # What the API answers is typed too: the run runs.load reads, the writer state.acting hands out.
    assert 'misuse_plugin.py:29: error: Incompatible return value type (got "str", expected "int")' in out, out
    assert 'misuse_plugin.py:34: error: Property "actor" defined in "Writer" is read-only' in out, out
    assert out.count(": error:") == 7, out


def _implicit_anys(t, seen: frozenset[str] = frozenset()) -> list[int]:
    """The kinds (``mypy.types.TypeOfAny``) of every ``Any`` in mypy's type ``t`` that was not written
    ``Any`` in the source (``TypeOfAny.explicit``): a name mypy could not resolve, a missing
    annotation, an error. Walks unions, generics' arguments, tuples, callables and aliases."""
    from mypy.types import (AnyType, CallableType, Instance, Overloaded, TupleType, TypeAliasType, TypeOfAny,
                            TypeType, UnionType, get_proper_type)

    if isinstance(t, TypeAliasType) and t.alias is not None:
        if t.alias.fullname in seen:
            return []
        seen = seen | {t.alias.fullname}
    t = get_proper_type(t)
    if isinstance(t, AnyType):
        while t.type_of_any == TypeOfAny.from_another_any and t.source_any is not None:
            t = t.source_any
        return [] if t.type_of_any == TypeOfAny.explicit else [t.type_of_any]
    parts: list = []
    if isinstance(t, Instance):
        parts = list(t.args)
    elif isinstance(t, (UnionType, TupleType)):
        parts = list(t.items)
    elif isinstance(t, CallableType):
        parts = [*t.arg_types, t.ret_type]
    elif isinstance(t, TypeType):
        parts = [t.item]
    elif isinstance(t, Overloaded):
        parts = list(t.items)
    return [kind for part in parts for kind in _implicit_anys(part, seen)]


def _signatures(node):
    """``(function's full name, parameter or "return", mypy type)`` for a function, a decorated
    function, an overload, or every method of a class."""
    from mypy.nodes import Decorator, FuncDef, OverloadedFuncDef, TypeInfo

    if isinstance(node, Decorator):
        node = node.func
    if isinstance(node, FuncDef) and node.type is not None:
        yield from ((node.fullname, name, t) for name, t in zip(node.type.arg_names, node.type.arg_types))
        yield node.fullname, "return", node.type.ret_type
    elif isinstance(node, OverloadedFuncDef):
        for item in node.items:
            yield from _signatures(item)
    elif isinstance(node, TypeInfo):
        for sym in node.names.values():
            if sym.node is not None:
                yield from _signatures(sym.node)


@pytest.fixture(scope="module")
def seam_build():
    """One in-process mypy build of loopx/api.py and the hookspecs (what they import followed
    silently, as pyproject's configuration does), with every module's tree kept."""
    import os

    from mypy import build
    from mypy.main import process_options

    sources, options = process_options(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", os.devnull,
                                        "--no-incremental", str(ROOT / "loopx" / "api.py"),
                                        str(ROOT / "loopx" / "seam" / "hookspecs")])
    return build.build(sources, options).graph


def test_no_hookspec_parameter_or_answer_is_any_by_accident(seam_build):
    """Every parameter and return annotation of every hookspec is a type mypy resolves: ``Any``
    only where it is written (free JSON, ``dict[str, Any]``), never a class mypy cannot see (a
    lazily-resolved name such as ``loopx.model.Goal`` was, so ``goal`` was ``Any`` to a plugin)."""
    from mypy.nodes import Decorator

    holes, specs = [], 0
    for module_id, state in seam_build.items():
        if not module_id.startswith("loopx.seam.hookspecs."):
            continue
        for name, sym in state.tree.names.items():
            if name.startswith("loopx_") and isinstance(sym.node, Decorator):
                specs += 1
                holes += [f"{where} {param}: {t}" for where, param, t in _signatures(sym.node) if _implicit_anys(t)]
    assert specs >= 10, specs
    assert holes == []


def test_no_name_the_api_serves_hides_a_class_mypy_cannot_see(seam_build):
    """No signature of what ``loopx.api`` serves (its names, each namespace's members, their
    methods) holds an ``Any`` that stands for a class mypy could not import (``TypeOfAny.from_unimported_type``:
    what ``goals.load`` or ``gates.load`` answered while ``loopx.model`` hid its classes)."""
    from mypy.types import TypeOfAny

    api = seam_build["loopx.api"].tree
    holes, seen = [], 0
    for name, sym in api.names.items():
        if name.startswith("_") or sym.node is None:
            continue
        module = seam_build.get(sym.node.fullname)  # a namespace (loopx.plugin_api.goals): its members
        nodes = [s.node for n, s in module.tree.names.items() if not n.startswith("_")] if module else [sym.node]
        for where, param, t in (sig for node in nodes for sig in _signatures(node)):
            seen += 1
            if TypeOfAny.from_unimported_type in _implicit_anys(t):
                holes.append(f"{name}: {where} {param}: {t}")
    assert seen > 100, seen
    assert holes == []

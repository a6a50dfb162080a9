"""The shape CONTRIBUTING.md asks of the code under loopx/ and plugins/ (tests aside), checked on the source:
no module uses a private (``_``-prefixed) name of another module; no file is over 500 lines and
no function over 80; a module is imported by a name in a string (``importlib.import_module``,
``__import__``) only at the few lazy boundaries listed here, which import-linter cannot see
through (the ledger once reached the events package that way, hiding an import cycle).

Each check has an allowlist of exceptions (empty today but for the lazy boundaries). An entry
whose file now keeps the rule fails the test, so a list never holds a stale exception.
"""

from __future__ import annotations

import ast

import pytest

from tests import source_trees
from tests.conftest import ROOT

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80

# Exceptions to the rules below: none. A new entry needs a reason written beside it.
PRIVATE_IMPORTS_ALLOWED: set[str] = set()
# Where a module is imported by name on purpose: the lazy boundaries (what a table names is
# imported when first used), each listed. Not an allowlist to empty: a new one is a design choice.
STRING_IMPORTS_ALLOWED = {
    "loopx/cli/__init__.py",  # the CLI's command table: a command's module loads when it runs
    "loopx/api.py",  # loopx.api's name table, resolved on first use (type checkers read its TYPE_CHECKING imports)
    "loopx/model/__init__.py",  # the model package's names, each loaded from its module on first use
    "loopx/seam/plugins.py",  # hookspecs and built-in plugins named in a table; entry points
    "loopx/store/schema.py",  # a migration names the function that fills its new rows
    "plugins/issue_fix/loopx_issue_fix/judge.py",  # the judge pins the test framework functions it names (in the tested interpreter)
}
LONG_FILES_ALLOWED: set[str] = set()
LONG_FUNCTIONS_ALLOWED: set[str] = set()


def _sources():
    for base in ("loopx", "plugins"):
        for path in sorted((ROOT / base).rglob("*.py")):
            # A plugin's tests are held to what tests/ is held to, not to this.
            if not {".venv", "build", "node_modules", "tests"} & set(path.parts):
                yield path.relative_to(ROOT).as_posix(), path.read_text()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(module: str) -> bool:
    top = module.split(".")[0]
    return top == "loopx" or top.startswith("loopx_")


def private_uses(source: str) -> list[str]:
    """The private names of other modules ``source`` uses: ``from M import _x``, and ``m._x``
    where ``m`` was imported from loopx or a plugin package (``import loopx.m as m``, ``from
    loopx import m``)."""
    tree = source_trees.parse(source)
    imported, found = set(), []
    for node in source_trees.nodes(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or _ours(node.module or "")):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}")
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            imported.update(a.asname or a.name.split(".")[0] for a in node.names if _ours(a.name))
    for node in source_trees.nodes(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported
                and _private(node.attr)):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def string_imports(source: str) -> list[str]:
    """Where ``source`` imports a module by a name held in a string."""
    found = []
    for node in source_trees.nodes(source_trees.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.append(f"line {node.lineno}: {name}(...)")
    return found


def long_functions(source: str) -> list[tuple[str, int]]:
    """``(qualified name, lines)`` of every function in ``source`` longer than the limit."""
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = child.end_lineno - child.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        out.append((name, lines))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(source_trees.parse(source), "")
    return out


def test_the_checks_see_what_they_look_for():
    # Each check on a small source that breaks its rule, and on one that keeps it.
    assert private_uses("from loopx.ledger.log import _applying\n") == ["line 1: from loopx.ledger.log import _applying"]
    assert private_uses("from loopx.turn import confine\nconfine._real('x')\n") == ["line 2: confine._real"]
    assert private_uses("from . import phases\nphases._refs\n") == ["line 2: phases._refs"]
    assert private_uses("import os\nos._exit\nfrom loopx import ledger\nledger.__name__\nself._x\n") == []
    body = "".join(f"    x = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"class A:\n    def f(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n") == [
        ("A.f", MAX_FUNCTION_LINES + 1)]
    assert long_functions(f"def g():\n{body[:-len('    x = 79' + chr(10))]}") == []
    assert string_imports("import importlib\nimportlib.import_module('loopx.ledger.events.goal')\n") == [
        "line 2: import_module(...)"]
    assert string_imports("from loopx.ledger.events import goal\n") == []


@pytest.mark.parametrize("rule", ["private names", "string imports", "file length", "function length"])
def test_the_code_keeps_its_shape(rule):
    broken, allowed = set(), {"private names": PRIVATE_IMPORTS_ALLOWED, "string imports": STRING_IMPORTS_ALLOWED,
                              "file length": LONG_FILES_ALLOWED, "function length": LONG_FUNCTIONS_ALLOWED}[rule]
    why = {}
    for path, source in _sources():
        if rule in ("private names", "string imports"):
            found = (private_uses if rule == "private names" else string_imports)(source)
            if found:
                broken.add(path)
                why[path] = found
        elif rule == "file length":
            lines = source.count("\n")
            if lines > MAX_FILE_LINES:
                broken.add(path)
                why[path] = lines
        else:
            for name, lines in long_functions(source):
                broken.add(f"{path}:{name}")
                why[f"{path}:{name}"] = lines
    new = {k: why[k] for k in sorted(broken - allowed)}
    assert not new, f"{rule}: fix these (CONTRIBUTING.md): {new}"
    assert not allowed - broken, f"{rule}: these keep the rule now; take them off the allowlist: {sorted(allowed - broken)}"

"""LoopX imports no private CPython module (``_datetime``, ``_sha256``, ``_socket``, ``_signal``...):
their names and contents change between Python versions without notice (``_sha256`` became
``_sha2`` in 3.12). The public module is imported instead, its cost measured by
bench/bench_startup.py against the start-up budgets (docs/performance.md)."""

from __future__ import annotations

import ast
import sys

from tests import source_trees
from tests.conftest import ROOT

#: Files allowed to import one: none (a new entry needs a reason written beside it).
STILL_PRIVATE: set[str] = set()


def _private_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in source_trees.nodes(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        found += [n for n in names if n.startswith("_") and not n.startswith("__")
                  and n.split(".")[0] in sys.stdlib_module_names]
    return found


def test_no_private_cpython_module_is_imported():
    from loopx.sandbox.process_watcher import WATCHER

    found = {"loopx/sandbox/process_watcher.py (WATCHER)": _private_imports(source_trees.parse(WATCHER))}
    for path in sorted([*(ROOT / "loopx").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        shown = str(path.relative_to(ROOT))
        if shown not in STILL_PRIVATE and "/.venv/" not in shown:
            found[shown] = _private_imports(source_trees.parse(path.read_text(encoding="utf-8")))
    assert {k: v for k, v in found.items() if v} == {}


def test_the_check_sees_a_private_import():
    assert _private_imports(source_trees.parse("import _socket\nfrom _datetime import datetime\nimport json")) == \
        ["_socket", "_datetime"]
    assert _private_imports(source_trees.parse("import _pytest.outcomes\nfrom . import _x")) == []

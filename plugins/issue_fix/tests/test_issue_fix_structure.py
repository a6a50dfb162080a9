"""The shape of the Issue-Fix package (issue 38): its modules import each other one way (no cycle,
counting imports inside functions), no module takes another's private name, no file is over
500 lines and no function over 80. (``mypy --strict`` on it runs with the core's and the other plugins'
in one run: tests/test_typecheck.py.)"""

from __future__ import annotations

import ast
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "loopx_issue_fix"
PREFIX = "loopx_issue_fix"


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.glob("*.py"))}


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import of a sibling module, wherever it stands."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PREFIX:
            if node.module == PREFIX:  # from loopx_issue_fix import gitrepo, __version__
                for a in node.names:
                    out.append((a.name, []) if (PACKAGE / f"{a.name}.py").exists() else ("__init__", [a.name]))
            else:
                out.append((node.module.split(".")[1], [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name.split(".")[1], []) for a in node.names if a.name.startswith(PREFIX + ".")]
    return out


def test_no_import_cycle_among_its_modules():
    graph = {name: {m for m, _ in _imports(tree) if m != name} for name, tree in _modules().items()}
    cycles = []

    def visit(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif len(path) < len(graph):
                visit(nxt, path + [nxt])

    for start in graph:
        visit(start, [start])
    assert cycles == []


def test_no_private_name_imported_across_its_modules():
    found = [(name, module, n) for name, tree in _modules().items() for module, names in _imports(tree)
             for n in names if n.startswith("_") and not n.startswith("__")]
    assert found == []


def test_no_file_over_500_lines_and_no_function_over_80():
    long_files = {p.name: n for p in PACKAGE.glob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    long_functions = [(name, node.name, node.end_lineno - node.lineno + 1) for name, tree in _modules().items()
                      for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.end_lineno - node.lineno + 1 > 80]
    assert long_files == {} and long_functions == []

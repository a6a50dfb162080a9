"""The store owns SQL (issue 38): no module outside ``loopx/store/`` holds SQL text, but the listed
exceptions (none today). Domain modules call the named operations in :mod:`loopx.store.queries` (or the store's
own methods) instead, so a change of schema or engine is made in one place.

The check reads every string literal of ``loopx/`` and ``plugins/`` (tests and docstrings aside)
and flags those that look like SQL: a statement's head (``SELECT ... FROM``, ``INSERT INTO``,
``UPDATE t SET``, ``DELETE FROM``, DDL, ``PRAGMA``) or a clause (``WHERE x``, ``ORDER BY``,
``JOIN t ON``, ``ON CONFLICT``), f-strings included. An entry on the allowlist whose module holds
no SQL any more fails the test.
"""

from __future__ import annotations

import ast
import re

from tests import source_trees
from tests.conftest import ROOT

SQL = re.compile(
    r"\b(SELECT\b.*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|CREATE\s+(UNIQUE\s+)?(TABLE|INDEX|TRIGGER|VIEW)|DROP\s+(TABLE|INDEX|TRIGGER|VIEW)|ALTER\s+TABLE"
    r"|PRAGMA\s+\w+|ON\s+CONFLICT\b|WHERE\s+[\w(]|ORDER\s+BY\b|JOIN\s+\w+\s+ON\b)",
    re.S,
)

#: Modules outside the store allowed to hold SQL: none. A lasting exception needs its reason
#: written beside it (and a test of why it cannot be a named operation in loopx.store.queries).
SQL_ALLOWED: set[str] = set()


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in source_trees.nodes(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_lines(source: str) -> list[int]:
    """The lines of ``source`` where a string literal (not a docstring) holds SQL text."""
    tree = source_trees.parse(source)
    docs, lines = _docstrings(tree), []
    for node in source_trees.nodes(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        else:
            continue
        if SQL.search(text):
            lines.append(node.lineno)
    return sorted(set(lines))


def _sources():
    for base in ("loopx", "plugins"):
        for path in sorted((ROOT / base).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("loopx/store/") or {".venv", "build", "node_modules", "tests"} & set(path.parts):
                continue
            yield rel, path.read_text()


def test_the_check_sees_sql_and_only_sql():
    for text in ('"SELECT id FROM goals WHERE id = ?"', 'f"UPDATE todos SET state = {x}"', '"DELETE FROM runs"',
                 '"INSERT OR IGNORE INTO t VALUES (?)"', '" WHERE goal_id = ?"', '" ORDER BY seq DESC"',
                 '"CREATE INDEX IF NOT EXISTS i ON t (a)"', '"PRAGMA user_version"', '" ON CONFLICT (k) DO NOTHING"'):
        assert sql_lines(f"x = {text}\n") == [1], text
    for text in ('"select the goal to run"', '"the todo is ordered by priority"', '"update the README"'):
        assert sql_lines(f"x = {text}\n") == [], text
    assert sql_lines('def f():\n    """SELECT x FROM y: what this returns."""\n') == []


def test_sql_lives_in_the_store():
    found = {rel: sql_lines(source) for rel, source in _sources()}
    found = {rel: lines for rel, lines in found.items() if lines}
    new = {rel: lines for rel, lines in sorted(found.items()) if rel not in SQL_ALLOWED}
    assert not new, "move this SQL into a named operation in loopx/store/queries/ (lines): " + repr(new)
    stale = sorted(SQL_ALLOWED - set(found))
    assert not stale, f"these hold no SQL now; take them off the allowlist: {stale}"

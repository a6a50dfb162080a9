"""Python sources parsed once per test worker, for the tests that check the code's text.

Six test files read every module of ``loopx/`` and ``plugins/`` as a syntax tree (private names,
string imports, function lengths, SQL outside the store, error codes, pluggy's internals, ...):
each parsed and walked every file again, about 1.5 s of CPU a test. Here a source text is parsed
once and its nodes listed once; the trees are shared, so a caller reads them and never changes them.
"""

from __future__ import annotations

import ast
import functools


@functools.lru_cache(maxsize=None)
def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, the same tree for the same text."""
    return ast.parse(source)


@functools.lru_cache(maxsize=None)
def nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node under ``tree``, in :func:`ast.walk`'s order."""
    return tuple(ast.walk(tree))

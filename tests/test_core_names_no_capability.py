"""The core's messages name no capability: what LoopX itself prints (errors, help, examples, the
dashboard, the shipped schemas) stays true whichever plugins are installed, so it never names a
bundled one (Issue-Fix, Self-Repair, Approvals) - an example is a placeholder or the example plugin.

Scanned: every string in loopx/*.py that a user can see - all but module, class and function
docstrings and comments, and a click command's docstring counts, being its ``--help`` - and every
other file shipped in loopx/ (dashboard, schemas).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import source_trees

CORE = Path(__file__).resolve().parent.parent / "loopx"
BUNDLED = re.compile(r"issue[-_ ]?fix|self[-_ ]?repair|\bapprovals\b", re.IGNORECASE)


def _hidden_docstrings(tree) -> set[int]:
    """The docstrings no user sees (a click command's is its help text, so it is not hidden)."""
    out = set()
    for node in source_trees.nodes(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                continue
            command = any(re.search(r"\b(command|group)\b", ast.unparse(d)) for d in getattr(node, "decorator_list", []))
            if not command:
                out.add(id(first.value))
    return out


def _strings_shown(path: Path):
    tree = source_trees.parse(path.read_text())
    hidden = _hidden_docstrings(tree)
    for node in source_trees.nodes(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in hidden:
            yield node.lineno, node.value


def core_mentions() -> list[str]:
    """``path:line: text`` for each user-visible core string naming a bundled capability."""
    found = []
    for path in sorted(CORE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(CORE.parent)
        if path.suffix == ".py":
            found += [f"{rel}:{line}: {text[:120]!r}" for line, text in _strings_shown(path) if BUNDLED.search(text)]
        elif path.suffix in (".json", ".js", ".html", ".css", ".md", ".txt", ".toml"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if BUNDLED.search(line):
                    found.append(f"{rel}:{n}: {line.strip()[:120]!r}")
    return found


def test_the_core_names_no_bundled_capability_to_its_users():
    assert core_mentions() == []


def test_the_scan_sees_what_a_user_sees(tmp_path):
    # An error message, a command's help and an example are caught; a comment and a plain
    # function's docstring are not (they are for whoever reads the code).
    sample = tmp_path / "sample.py"
    sample.write_text('''"""Module notes: issue-fix is fine here."""
import click


def helper():
    """Talks about self-repair for the reader."""
    # approvals, in a comment
    raise ValueError("try 'issue-fix start'")


@click.command()
def shown():
    """Help text naming self-repair."""


EXAMPLES = {"x": ["loopx approvals serve"]}
''')
    texts = [t for _line, t in sorted(_strings_shown(sample)) if BUNDLED.search(t)]
    assert texts == ["try 'issue-fix start'", "Help text naming self-repair.", "loopx approvals serve"]

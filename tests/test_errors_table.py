"""The error codes are a table: every code raised in loopx/ and plugins/ is listed with what it
means, every listed code is raised somewhere (or is reserved, with a reason), and docs/errors.md
shows the table as the code has it."""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

from loopx.values.errors import CODES, RESERVED
from tests import source_trees

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import error_codes_doc  # noqa: E402

#: Raise sites whose code is not a string literal, by file and the code argument as written, and
#: the codes each can raise. Each of these codes must be a string literal in that file (what the
#: expression picks from); a new site of this kind fails the test until it is listed here.
DYNAMIC = {
    ("loopx/domain/goals.py", "'goal_closed' if status == 'closed' else 'goal_not_open'"): {"goal_closed", "goal_not_open"},
    ("loopx/domain/todos.py", "*refusal"): {"todo_not_ready", "gate_pending", "todo_claimed"},  # why_not_ready()
    ("loopx/domain/todos.py", "code"): {"gate_pending", "step_failed"},
    ("loopx/views/registry_copy.py", "damaged[0].code if damaged[0].code == 'integrity_key_missing' else 'copy_mismatch'"):
        {"integrity_key_missing", "copy_mismatch"},
    # A code passed on: the broker's answer, an error caught and raised again with more words.
    ("loopx/mcp_server.py", "code if code != 'internal_error' else 'invalid_argument'"): {"invalid_argument"},
    ("loopx/domain/evidence.py", "exc.code"): set(),
    # The caller's code (loopx.domain.workspace passes workspace_unavailable), else its default.
    ("loopx/values/gitcmd.py", "code"): {"workspace_git_failed"},
    ("loopx/status_server/server.py", "err.code"): set(),
    ("plugins/issue_fix/loopx_issue_fix/verify.py", "f'issue_fix.{a.reason}'"):
        {"issue_fix.tests_weakened", "issue_fix.not_a_test_failure", "issue_fix.tests_changed",
         "issue_fix.environment_changed", "issue_fix.git_changed", "issue_fix.runner_tampered"},
    ("plugins/issue_fix/loopx_issue_fix/phases.py", "f'issue_fix.{code}'"):
        {"issue_fix.tree_mismatch", "issue_fix.changed_since_verify"},
}


def _sources():
    for top in ("loopx", "plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/tests/" not in rel:
                yield rel, path.read_text()


@functools.cache
def _raise_sites():
    """``(literal codes, {(file, expression): line})`` of every ``LoopxError(...)`` call."""
    literal: dict[str, list[str]] = {}
    dynamic: dict[tuple[str, str], int] = {}
    for rel, text in _sources():
        for node in source_trees.nodes(source_trees.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name != "LoopxError":
                continue
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "code"), None)
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                literal.setdefault(first.value, []).append(f"{rel}:{node.lineno}")
            else:
                dynamic[(rel, ast.unparse(first) if first is not None else "")] = node.lineno
    return literal, dynamic


def _plugin_codes() -> dict[str, str]:
    return {code: text for codes in error_codes_doc.plugin_codes().values() for code, text in codes.items()}


def test_every_code_has_a_one_line_description():
    for code, text in CODES.items():
        assert re.fullmatch(r"[a-z][a-z_]*", code), code
        assert text.strip() and "\n" not in text, code
    assert set(RESERVED) <= set(CODES)
    assert all(why.strip() for why in RESERVED.values())


def test_every_code_raised_is_listed():
    literal, dynamic = _raise_sites()
    known = set(CODES) | set(_plugin_codes())
    assert len(literal) > 40  # the scan found the raise sites
    unlisted = {code: sites for code, sites in literal.items() if code not in known}
    assert not unlisted, f"raised but not in loopx/values/errors.py CODES (or a plugin's codes): {unlisted}"
    new = {site: line for site, line in dynamic.items() if site not in DYNAMIC}
    assert not new, f"raise sites whose code is not a literal: list them in DYNAMIC with their codes: {new}"
    gone = set(DYNAMIC) - set(dynamic)
    assert not gone, f"DYNAMIC lists raise sites that are no longer there: {gone}"
    for (rel, _), codes in DYNAMIC.items():
        text = (ROOT / rel).read_text()
        for code in codes:
            assert code in known, code
            assert f'"{code.split(".")[-1]}"' in text, f"{rel} never names {code!r}"


def test_every_listed_code_is_raised_somewhere():
    literal, _ = _raise_sites()
    raised = set(literal) | {code for codes in DYNAMIC.values() for code in codes}
    never = set(CODES) - set(RESERVED) - raised
    assert not never, f"listed but raised nowhere (raise them, or say in RESERVED why they stay): {never}"
    still = set(RESERVED) & raised
    assert not still, f"reserved, yet raised: {still}"
    assert not set(_plugin_codes()) - raised, "a bundled plugin registers a code it never raises"


def test_docs_list_every_code_as_the_table_says():
    p = subprocess.run([sys.executable, "scripts/error_codes_doc.py", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = (ROOT / "docs" / "errors.md").read_text()
    for code, text in {**CODES, **_plugin_codes()}.items():
        assert f"| `{code}` | {text.replace('|', chr(92) + '|')} |" in doc
    assert "docs/errors.md" in (ROOT / "README.md").read_text()


def test_a_drifted_table_is_reported(tmp_path):
    for part in ("scripts", "loopx", "plugins", "docs"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    doc = tmp_path / "docs" / "errors.md"
    doc.write_text(doc.read_text().replace("| `disk_full` |", "| `disk_fool` |"))
    p = subprocess.run([sys.executable, "scripts/error_codes_doc.py", "--check"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 1 and "--write" in p.stderr

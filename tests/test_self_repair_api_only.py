"""Self-repair is a capability a third party could have written (issue 27): a copy of
``plugins/self_repair`` that imports nothing of LoopX but ``loopx.api`` and runs no SQL passes
the plugin's own behaviour tests, loaded through its entry point from the copy."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT

PLUGIN = ROOT / "plugins" / "self_repair"
#: Calls that would mean the plugin talks to the store itself (``tx.one``/``tx.query``/``execute``).
SQL_CALLS = {"one", "query", "execute", "executemany", "executescript"}


def _problems(package) -> list[str]:
    """What in ``package`` is not the plugin API: an import of LoopX other than exactly
    ``loopx.api``, an import of a database driver, or a call that runs SQL."""
    out = []
    files = sorted(package.rglob("*.py"))
    assert files, f"no Python files under {package}"
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] if node.level == 0 else []
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
                out.append(f"{path.name}:{node.lineno}: calls .{node.func.attr}()")
                continue
            else:
                continue
            for m in modules:
                top = m.split(".")[0]
                if (top == "loopx" and m != "loopx.api") or top in ("sqlite3", "psycopg", "psycopg2"):
                    out.append(f"{path.name}:{node.lineno}: imports {m}")
    return out


def test_the_ast_check_sees_what_it_forbids(tmp_path):
    # The check itself can fail: each forbidden thing, alone in a module, is named.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text("from loopx.api import hookimpl\nimport click\n")
    assert _problems(pkg) == []
    for i, line in enumerate(["from loopx import hookimpl", "import loopx.ledger", "from loopx.store import schema",
                              "import sqlite3", "def f(tx):\n    return tx.query('SELECT 1')"]):
        (pkg / f"bad{i}.py").write_text(line + "\n")
        assert len(_problems(pkg)) == 1, line
        (pkg / f"bad{i}.py").unlink()


def test_a_copy_importing_only_the_api_passes_the_plugin_tests(tmp_path):
    site = tmp_path / "site"
    copy = site / "loopx_self_repair"
    shutil.copytree(PLUGIN / "loopx_self_repair", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _problems(copy) == []

    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(PLUGIN / "tests" / "test_self_repair_detectors.py", tests)
    # Whatever the tests import as loopx_self_repair, and the plugin LoopX loads through its entry
    # point (``self_repair = loopx_self_repair.plugin``), must be the copy.
    (tests / "conftest.py").write_text(
        "import os\n"
        "import loopx_self_repair.plugin\n"
        "from loopx import plugins\n\n"
        "COPY = os.environ['SELF_REPAIR_COPY']\n"
        "assert loopx_self_repair.plugin.__file__.startswith(COPY), loopx_self_repair.plugin.__file__\n\n\n"
        "def pytest_runtest_setup(item):\n"
        "    loaded = plugins.get_plugin_manager().get_plugin('self_repair')\n"
        "    assert loaded is not None and loaded.__file__.startswith(COPY), loaded\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(PYTHONPATH=str(site), SELF_REPAIR_COPY=str(copy), LOOPX_PLUGIN_CACHE="0")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(tests)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-500:]

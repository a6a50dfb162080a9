"""Self-repair is a capability a third party could have written (issue 27): a copy of
``plugins/self_repair`` that imports nothing of LoopX but ``loopx.api`` and runs no SQL passes
the plugin's own behaviour tests, loaded through its entry point from the copy - tests that
themselves import nothing of LoopX but ``loopx.api`` and ``loopx.testing`` (issue 39), checked
in their text and, while they run, on every import they make. And no bundled plugin's tests
reach past those two modules."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

import pytest

from loopx.testing import check_plugin_imports
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
    for i, line in enumerate(["from loopx import hookimpl", "import loopx.ledger.log", "from loopx.store import schema",
                              "import sqlite3", "def f(tx):\n    return tx.query('SELECT 1')"]):
        (pkg / f"bad{i}.py").write_text(line + "\n")
        assert len(_problems(pkg)) == 1, line
        (pkg / f"bad{i}.py").unlink()


@pytest.mark.slow
def test_a_copy_importing_only_the_api_passes_the_plugin_tests(tmp_path):
    site = tmp_path / "site"
    copy = site / "loopx_self_repair"
    shutil.copytree(PLUGIN / "loopx_self_repair", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _problems(copy) == []

    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(PLUGIN / "tests" / "test_self_repair_detectors.py", tests)
    assert check_plugin_imports(tests, tests=True) == []
    # Whatever the tests import as loopx_self_repair, and the plugin LoopX loads through its entry
    # point (``self_repair = loopx_self_repair.plugin``), must be the copy; and every import the
    # copy or its tests make while they run names loopx.api or loopx.testing, nothing else of LoopX.
    # (The harness's own imports come first; the guard then watches every import after it.)
    (tests / "conftest.py").write_text(
        "import os\n"
        "import loopx_self_repair.plugin\n"
        "from loopx.seam import plugins\n\n"
        "COPY = os.environ['SELF_REPAIR_COPY']\n"
        "assert loopx_self_repair.plugin.__file__.startswith(COPY), loopx_self_repair.plugin.__file__\n\n\n"
        "def pytest_runtest_setup(item):\n"
        "    loaded = plugins.get_plugin_manager().get_plugin('self_repair')\n"
        "    assert loaded is not None and loaded.__file__.startswith(COPY), loaded\n\n\n" + GUARD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(PYTHONPATH=str(site), SELF_REPAIR_COPY=str(copy), LOOPX_PLUGIN_CACHE="0")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(tests)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout, p.stdout[-500:]


#: Installed by the copy's conftest: an import of LoopX made by a file of the copy or of its tests
#: (the importer's ``__file__``) that is not ``loopx.api`` or ``loopx.testing`` fails at once.
GUARD = """import builtins
import os

_ROOTS = (os.environ['SELF_REPAIR_COPY'], os.path.dirname(os.path.abspath(__file__)))
_ALLOWED = {'loopx', 'loopx.api', 'loopx.testing', 'loopx.hookimpl', 'loopx.__version__'}
_import = builtins.__import__


def _guarded(name, globals=None, locals=None, fromlist=(), level=0):
    where = (globals or {}).get('__file__') or ''
    if level == 0 and where.startswith(_ROOTS) and (name == 'loopx' or name.startswith('loopx.')):
        wanted = [name] + [name + '.' + f for f in (fromlist or ()) if name == 'loopx']
        bad = [w for w in wanted if w not in _ALLOWED]
        if bad:
            raise ImportError(f'{where} imports {bad[0]}: only loopx.api and loopx.testing')
    return _import(name, globals, locals, fromlist, level)


builtins.__import__ = _guarded

"""


def test_the_import_guard_refuses_what_it_should(tmp_path, monkeypatch):
    # The guard itself can fail: a module under the copy importing a core module is refused.
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "bad.py").write_text("from loopx.ledger import log as ledger\n")
    (copy / "good.py").write_text("from loopx import api\nfrom loopx.testing import CliResult\n")
    monkeypatch.setenv("SELF_REPAIR_COPY", str(copy))
    namespace = {"__file__": str(tmp_path / "tests" / "conftest.py")}
    before = __import__("builtins").__import__
    try:
        exec(GUARD, namespace)
        exec((copy / "good.py").read_text(), {"__file__": str(copy / "good.py")})
        with pytest.raises(ImportError, match="loopx.ledger"):
            exec((copy / "bad.py").read_text(), {"__file__": str(copy / "bad.py")})
    finally:
        __import__("builtins").__import__ = before


@pytest.mark.parametrize("tests", sorted(p for p in (ROOT / "plugins").glob("*/tests") if p.is_dir()),
                         ids=lambda p: p.parent.name)
def test_no_bundled_plugin_test_imports_more_than_the_api_and_testing(tests):
    assert check_plugin_imports(tests, tests=True) == []


def test_the_test_import_check_sees_a_core_import(tmp_path):
    (tmp_path / "test_x.py").write_text("from loopx.testing import tamper_sqlite\nfrom loopx import api\n")
    assert check_plugin_imports(tmp_path, tests=True) == []
    assert check_plugin_imports(tmp_path) != []  # a plugin's own code may not import loopx.testing
    (tmp_path / "test_y.py").write_text("def f():\n    from loopx.ledger import log as ledger\n")
    assert check_plugin_imports(tmp_path, tests=True) == ["tmp_path_name/test_y.py:2: from loopx.ledger import log"
                                                          .replace("tmp_path_name", tmp_path.name)]

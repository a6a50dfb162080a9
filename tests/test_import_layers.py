"""The import direction of the architecture holds and loopx has no import circles, checked by
import-linter with the contracts in pyproject.toml ([tool.importlinter])."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_import_contracts_are_kept():
    pytest.importorskip("importlinter", reason="install the test extra: pip install -e '.[test]'")
    p = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c;"
                        " sys.exit(c.main(args=['--no-cache'], standalone_mode=False))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in p.stdout

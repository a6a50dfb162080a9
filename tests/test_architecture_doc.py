"""docs/architecture.md tells a newcomer the truth: its generated diagrams (the import layers,
the hooks) are the ones the code gives today, and every module, function and file it names exists."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"


def test_generated_diagrams_match_the_code():
    p = subprocess.run([sys.executable, "scripts/architecture_diagrams.py", "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    text = DOC.read_text()
    for section in ("## The layers", "## The write path", "## The should-run path", "## The plugin seam"):
        assert section in text
    # The diagram lists every layer contract of pyproject.toml, and the hooks the code specifies.
    assert "status server: server -> handler" in text and "loopx_register_executors(register)" in text


def test_a_drifted_diagram_is_reported(tmp_path):
    """The check compares for real: a layer the doc shows but pyproject.toml lacks fails it."""
    import shutil

    for part in ("scripts", "docs", "loopx/seam/hookspecs"):
        shutil.copytree(ROOT / part, tmp_path / part)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text().replace(
        '    "loopx.views",\n', ""))
    p = subprocess.run([sys.executable, "scripts/architecture_diagrams.py", "--check"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "the layers diagram" in p.stdout


def _names(text: str) -> set[str]:
    return set(re.findall(r"\bloopx(?:\.[A-Za-z_]\w*)+", text))


def test_every_name_the_doc_gives_exists():
    text = DOC.read_text()
    missing = []
    for dotted in sorted(_names(text)):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(dotted)
            break
        else:
            missing.append(dotted)
    for path in sorted(set(re.findall(r"\bloopx/[\w/]+\.py\b", text))):
        if not (ROOT / path).exists():
            missing.append(path)
    assert missing == [], f"docs/architecture.md names what does not exist: {missing}"
    assert {"loopx.ledger.registry.Registry.mutate", "loopx.views.should_run.should_run"} <= _names(text)


def test_contributing_names_real_files():
    """CONTRIBUTING.md's commands and pointers lead somewhere: every test file, script, benchmark
    and document it names exists (a glob like tests/test_cli_*.py matches at least one file)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"\b(?:tests|bench|scripts|docs|loopx|plugins|examples)/[\w/*.-]*[\w*]", text))
    assert len(named) > 20
    missing = [n for n in sorted(named) if not any(ROOT.glob(n.rstrip("/")))]
    assert missing == [], f"CONTRIBUTING.md names what does not exist: {missing}"

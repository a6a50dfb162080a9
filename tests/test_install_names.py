"""Installing LoopX cannot resolve to another project (issue 37): a different project is
published on the package index as `loopx`. The core's distribution is `loopx-control`, the
plugins require that name, and the docs install LoopX from its checkout, never by name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT

PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.slow
def test_a_plugin_is_not_installed_against_the_unrelated_loopx(tmp_path):
    """In an environment holding the unrelated `loopx` 2.1.1, pip refuses a plugin (its core is
    missing) instead of taking that project as LoopX."""
    import shutil

    wheels, source = tmp_path / "wheels", tmp_path / "self_repair"
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    shutil.copytree(ROOT / "plugins" / "self_repair", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)])
    assert built.returncode == 0, built.stderr[-2000:]
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    py = str(venv / "bin" / "python")
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    info = Path(site) / "loopx-2.1.1.dist-info"  # installed as pip would leave it
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: loopx\nVersion: 2.1.1\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    assert re.search(r"^loopx +2\.1\.1$", _run([py, "-m", "pip", "list"]).stdout, re.M)
    p = _run([py, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "loopx-self-repair"])
    assert p.returncode != 0, p.stdout
    assert "loopx-control" in p.stderr, p.stderr
    assert "loopx-self-repair" not in _run([py, "-m", "pip", "list"]).stdout


def test_the_core_and_every_plugin_name_the_core_loopx_control():
    assert re.search(r'^name = "loopx-control"$', (ROOT / "pyproject.toml").read_text(), re.M)
    for plugin in [*PLUGINS, ROOT / "examples" / "plugins" / "loopx-seed-domain"]:
        deps = re.search(r"^dependencies = \[(.*?)\]", (plugin / "pyproject.toml").read_text(), re.M | re.S).group(1)
        names = {re.split(r"[<>=!~\[ ;]", d.strip().strip("\"'"))[0] for d in deps.split(",") if d.strip()}
        assert "loopx-control" in names and "loopx" not in names, (plugin.name, names)


def test_no_document_installs_loopx_by_name():
    """Every `pip install` in the docs installs a path (the checkout, a plugin's folder) or a
    named third-party dependency, never `loopx` or `loopx[...]` from the index."""
    docs = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md"),
            *(ROOT / "skills").rglob("*.md"),
            *ROOT.glob("plugins/*/README.md"), *ROOT.glob("plugins/*/*/SKILL.md")]
    sources = list((ROOT / "loopx").rglob("*.py"))
    bad = []
    for f in docs + sources:
        for m in re.finditer(r"pip install ([^`\n)&;|#]*)", f.read_text()):
            for word in m.group(1).split():
                name = word.strip("'\"")
                if re.fullmatch(r"loopx(-control)?(\[[a-z,]+\])?([<>=].*)?", name):
                    bad.append(f"{f.relative_to(ROOT)}: {m.group(0)}")
    assert not bad, bad

"""Helpers for Issue-Fix tests: real git repositories with failing pytest suites, and the CLI.

:func:`make_project` makes a tiny project (``calc.add`` subtracts instead of adding) whose
pytest suite has one failing and one passing test. :func:`make_library` builds a small library
(``chunkit``: split sequences into chunks, windows and pages) with its own pytest suite of
several modules, and seeds an off-by-one into it. Both are committed in a fresh repository
with a bare repository as ``origin``. :func:`as_agent` runs a contract action the way an agent
pastes it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

#: What pytest needs to run (its distribution's requirements on this Python), and nothing more.
PYTEST_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")


def project_python() -> str:
    """The interpreter the test projects run their tests with: like a user's project's, a
    virtualenv whose site-packages holds pytest and what pytest needs, and nothing else.

    LoopX's own test environment has six pytest plugins besides (xdist, hypothesis, anyio, ...):
    a project run with its interpreter would load every one of them in every test run Issue-Fix
    judges (0.7 s of CPU for a two-test project instead of 0.2 s; those runs were over half the
    CPU of the Issue-Fix tests). Made once, beside this environment (``sys.prefix``, which the
    step worlds show, unlike ``$HOME`` or ``/tmp``), named for the versions it links to; its
    site-packages links to this environment's copies. Outside a virtualenv, or where it cannot be
    made, this interpreter itself."""
    from importlib.metadata import PackageNotFoundError, distribution

    if sys.prefix == sys.base_prefix:
        return sys.executable
    try:
        dists = [distribution(name) for name in PYTEST_DISTRIBUTIONS]
    except PackageNotFoundError:
        return sys.executable
    key = "-".join(f"{d.metadata['Name']}{d.version}" for d in dists).lower()
    home = Path(sys.prefix, f"project-python-{key}")
    python = home / "bin" / "python"
    if python.exists():
        return str(python)
    import tempfile
    import venv

    try:
        made = Path(tempfile.mkdtemp(prefix=".project-python-", dir=sys.prefix))
        venv.EnvBuilder(symlinks=True, with_pip=False).create(made)
        site = next((made / "lib").glob("python3*/site-packages"))
        for dist in dists:
            tops = {Path(str(f)).parts[0] for f in dist.files or ()} - {"..", "__pycache__"}
            for top in tops:
                os.symlink(dist.locate_file(top), site / top)
        try:
            os.rename(made, home)  # at once, for every xdist worker: one of them makes it
        except OSError:
            import shutil

            shutil.rmtree(made, ignore_errors=True)  # another worker's is there
    except OSError:
        return sys.executable
    return str(python)


PY = shlex.quote(project_python())
TEST_COMMAND = f"{PY} -m pytest -q"
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
WRONG = "def add(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n")
FAILING_ID = "test_calc.py::test_add"


def git(repo, *args) -> str:
    """Run git in ``repo`` for the test, failing loudly."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _init(repo: Path, files: dict[str, str]) -> Path:
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "Dev")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    origin = repo.parent / (repo.name + "-origin.git")
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    git(repo, "remote", "add", "origin", str(origin))
    return repo


def make_project(root: Path, *, code: str = BUGGY, test: str = TEST) -> Path:
    """A committed repository holding ``calc.py`` (``code``) and its pytest suite."""
    return _init(root / "project", {"calc.py": code, "test_calc.py": test})


def origin_of(repo: Path) -> Path:
    """The bare repository that is ``repo``'s ``origin``."""
    return repo.parent / (repo.name + "-origin.git")


LIB_CHUNKS = '''"""Split sequences into pieces."""


def chunks(seq, size):
    """Consecutive pieces of ``seq`` of ``size`` items (the last may be shorter)."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [seq[i:i + size] for i in range(0, len(seq), size)]


def windows(seq, size):
    """Every run of ``size`` consecutive items, in order."""
    return [seq[i:i + size] for i in range(len(seq) - size + 1)]
'''
LIB_PAGES = '''"""Pages of a sequence, numbered from 1."""

from chunkit.chunks import chunks


def page_count(total, per_page):
    """How many pages ``total`` items fill."""
    return -(-total // per_page)


def page(seq, number, per_page):
    """Page ``number`` (1-based) of ``seq``."""
    return chunks(seq, per_page)[number - 1] if 1 <= number <= page_count(len(seq), per_page) else []
'''
LIB_TESTS = {
    "tests/test_chunks.py": '''import pytest

from chunkit.chunks import chunks, windows


def test_chunks_even():
    assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


def test_chunks_ragged():
    assert chunks([1, 2, 3], 2) == [[1, 2], [3]]


def test_chunks_rejects_zero():
    with pytest.raises(ValueError):
        chunks([1], 0)


def test_windows():
    assert windows([1, 2, 3, 4], 3) == [[1, 2, 3], [2, 3, 4]]


def test_windows_whole():
    assert windows([1, 2], 2) == [[1, 2]]
''',
    "tests/test_pages.py": '''from chunkit.pages import page, page_count


class TestPages:
    def test_count(self):
        assert page_count(5, 2) == 3

    def test_last_page(self):
        assert page([1, 2, 3, 4, 5], 3, 2) == [5]

    def test_out_of_range(self):
        assert page([1, 2], 2, 2) == []
''',
}


def make_library(root: Path) -> Path:
    """``chunkit`` with its suite, and an off-by-one seeded in ``windows`` (the last window is lost)."""
    seeded = LIB_CHUNKS.replace("range(len(seq) - size + 1)", "range(len(seq) - size)")
    assert seeded != LIB_CHUNKS
    files = {"chunkit/__init__.py": '"""chunkit: sequences in pieces."""\n__version__ = "1.0"\n',
             "chunkit/chunks.py": seeded, "chunkit/pages.py": LIB_PAGES,
             "pyproject.toml": '[project]\nname = "chunkit"\nversion = "1.0"\n\n[tool.pytest.ini_options]\n'
                               'testpaths = ["tests"]\npythonpath = ["."]\n',
             ".gitignore": "__pycache__/\n", **LIB_TESTS}
    return _init(root / "chunkit", files)


class Result:
    """Exit code, stdout, stderr, and stdout parsed as JSON."""

    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self):
        return json.loads(self.out)

    def __repr__(self):
        return f"Result(code={self.code}, out={self.out[-3000:]!r}, err={self.err[-3000:]!r})"


def as_agent(cli, command: str, **extra_env) -> Result:
    """Run one contract action the way an agent pastes it (as the executor)."""
    argv = shlex.split(command)
    assert argv[0] == "loopx", command
    return cli(*argv[1:], env={"LOOPX_ACTOR": "executor", **extra_env})

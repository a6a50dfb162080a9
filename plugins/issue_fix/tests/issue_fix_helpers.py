"""Helpers for Issue-Fix tests: a real git repository with a failing test, and the CLI.

:func:`make_project` makes a tiny Python project (``calc.add`` subtracts instead of adding)
with a unittest that fails, committed in a fresh repository, with a bare repository as its
``origin``. :func:`as_agent` runs a contract action the way an agent pastes it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path


TEST_COMMAND = f"{shlex.quote(sys.executable)} -m unittest -q test_calc"
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = ("import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")


def git(repo, *args) -> str:
    """Run git in ``repo`` for the test, failing loudly."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_project(root: Path, *, code: str = BUGGY) -> Path:
    """A committed git repository holding ``calc.py`` (``code``) and its unittest."""
    repo = root / "project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "Dev")
    (repo / "calc.py").write_text(code)
    (repo / "test_calc.py").write_text(TEST)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc: add")
    origin = root / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    git(repo, "remote", "add", "origin", str(origin))
    return repo


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

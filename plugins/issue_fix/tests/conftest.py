"""Fixtures for Issue-Fix tests (helpers live in ``issue_fix_helpers``, a uniquely named module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from issue_fix_helpers import Result, make_project


@pytest.fixture(autouse=True)
def worktrees(tmp_path, monkeypatch) -> Path:
    """Goals' worktrees go under the test's own directory (not ``~/.local/share``)."""
    root = tmp_path / "loopx-issue-fix-worktrees"
    monkeypatch.setenv("LOOPX_ISSUE_FIX_WORKTREES", str(root))
    # LoopX's data directory (the reviewer packets) too.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    return root


@pytest.fixture
def project(tmp_path) -> Path:
    """A repository whose test fails until ``calc.add`` is fixed."""
    return make_project(tmp_path)


@pytest.fixture
def cli(loopx_registry, loopx_cli):
    """``cli("issue-fix", "show", ..., env={...})`` -> :class:`Result`, in-process, on a fresh registry
    (``loopx_cli`` of ``loopx.testing``)."""
    url = str(loopx_registry.store.url)

    def call(*args, env=None):
        r = loopx_cli(*args, env=env)
        return Result(r.code, r.out, r.err)

    call.url = url
    return call

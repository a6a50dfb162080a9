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


class Reproduced:
    """A goal on :func:`make_project`'s project, started and reproduced (waiting for its fix), with
    the ``cli`` and ``registry`` it lives in."""

    def __init__(self, cli, registry, project: Path, goal_id: str, worktree: Path):
        self.cli, self.registry, self.project = cli, registry, project
        self.goal_id, self.worktree = goal_id, worktree


def _home(live: Path, config: Path) -> dict:
    """Everything of a goal lives beneath ``live`` (its project, registry, packets, worktrees), its
    registry's key and rollback anchor beneath ``config``: the environment saying so."""
    return {"LOOPX_REGISTRY": str(live / "registry.db"), "XDG_CONFIG_HOME": str(config),
            "XDG_DATA_HOME": str(live / "xdg-data"), "LOOPX_ISSUE_FIX_WORKTREES": str(live / "loopx-issue-fix-worktrees")}


@pytest.fixture(scope="session")
def _reproduced_once(tmp_path_factory):
    """Start and reproduce a goal once for the session (on this worker; ``loopx`` processes, as a
    user and an agent would), then keep a pristine copy of everything it wrote. Its paths are
    absolute, so each test gets the copy back at the same place (one test at a time per worker)."""
    import os
    import shutil
    import subprocess
    import sys

    from test_issue_fix import start, step

    root = tmp_path_factory.mktemp("reproduced")
    live = root / "live"
    (live / "cwd").mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    base.update(_home(live, root / "config"))

    def cli(*args, env=None):
        p = subprocess.run([sys.executable, "-m", "loopx", *map(str, args)], env={**base, **(env or {})},
                           cwd=live / "cwd", capture_output=True, text=True, timeout=300)
        return Result(p.returncode, p.stdout, p.stderr)

    project = make_project(live)
    out = start(cli, project)
    r, _ = step(cli, out["goal_id"])
    assert r.json["reproduced"] is True, r
    shutil.copytree(live, root / "pristine", symlinks=True)
    return live, root / "pristine", root / "config", project, out["goal_id"], Path(out["worktree"])


@pytest.fixture
def reproduced_goal(_reproduced_once, loopx_cli, tmp_path, monkeypatch) -> Reproduced:
    """A goal started and reproduced on the tiny ``calc`` project, the test's own: a fresh copy of
    the one reproduced for the session (start and reproduce are the same steps in every such test; the
    tests of those steps themselves run them). Its ``cli`` runs in-process, as the ``cli`` fixture."""
    import shutil

    from loopx import api

    live, pristine, config, project, goal_id, worktree = _reproduced_once
    shutil.rmtree(live, ignore_errors=True)
    shutil.copytree(pristine, live, symlinks=True)
    # The key and anchor in a config directory of the test's own: LoopX remembers an anchor by its
    # path, and one left by an earlier test of this copy would be ahead of it (a rollback).
    shutil.copytree(config, tmp_path / "xdg-config-reproduced", symlinks=True)
    env = _home(live, tmp_path / "xdg-config-reproduced")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(live / "cwd")

    def cli(*args, env=None):
        r = loopx_cli(*args, env={"LOOPX_REGISTRY": cli.url, **(env or {})})
        return Result(r.code, r.out, r.err)

    cli.url = env["LOOPX_REGISTRY"]
    with api.open_registry(cli.url) as registry:
        yield Reproduced(cli, registry, project, goal_id, worktree)

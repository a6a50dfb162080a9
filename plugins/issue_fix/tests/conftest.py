"""Fixtures for Issue-Fix tests (helpers live in ``issue_fix_helpers``, a uniquely named module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from issue_fix_helpers import Result, make_project


def pytest_configure(config):
    """The repository's markers these tests use, also when they run on their own: ``pytest
    plugins/issue_fix/tests`` takes the plugin's pyproject.toml for its configuration, not the
    repository's, and would warn of an unknown mark at every ``slow`` test."""
    config.addinivalue_line("markers", "slow: 2 s of CPU or more; left out of the quick tier (pyproject.toml)")
    config.addinivalue_line("markers", "agents: drives the real agent CLIs (pyproject.toml)")


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
    """A goal on :func:`make_project`'s project taken to a phase, with the ``cli`` and ``registry`` it
    lives in and what ``issue-fix start`` answered (``start``)."""

    def __init__(self, cli, registry, project: Path, goal_id: str, worktree: Path, start: dict):
        self.cli, self.registry, self.project = cli, registry, project
        self.goal_id, self.worktree, self.start = goal_id, worktree, start


def _home(live: Path, config: Path) -> dict:
    """Everything of a goal lives beneath ``live`` (its project, registry, packets, worktrees), its
    registry's key and rollback anchor beneath ``config``: the environment saying so."""
    return {"LOOPX_REGISTRY": str(live / "registry.db"), "XDG_CONFIG_HOME": str(config),
            "XDG_DATA_HOME": str(live / "xdg-data"), "LOOPX_ISSUE_FIX_WORKTREES": str(live / "loopx-issue-fix-worktrees")}


def _template(tmp_path_factory, stage: str):
    """Take a goal on :func:`make_project`'s project to ``stage`` ("reproduced", or "handed_off":
    fixed, verified and handed off, waiting for the publish gate) once for the session (on this
    worker; ``loopx`` processes, as a user and an agent would), then keep a pristine copy of
    everything it wrote. Its paths are absolute, so each test gets the copy back at the same place
    (one test at a time per worker)."""
    import os
    import shutil
    import subprocess
    import sys

    from issue_fix_helpers import FIXED
    from test_issue_fix import start, step

    root = tmp_path_factory.mktemp(stage)
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
    if stage == "handed_off":
        Path(out["worktree"], "calc.py").write_text(FIXED)
        step(cli, out["goal_id"])
        step(cli, out["goal_id"], "--root-cause", "add used subtraction")
    shutil.copytree(live, root / "pristine", symlinks=True)
    return live, root / "pristine", root / "config", project, out


def _restore(template, loopx_cli, tmp_path, monkeypatch):
    """The template's goal, the test's own: its copy put back, the environment pointing at it."""
    import shutil

    from loopx import api

    live, pristine, config, project, out = template
    shutil.rmtree(live, ignore_errors=True)
    shutil.copytree(pristine, live, symlinks=True)
    # The key and anchor in a config directory of the test's own: LoopX remembers an anchor by its
    # path, and one left by an earlier test of this copy would be ahead of it (a rollback).
    config_dir = tmp_path / "xdg-config-template"
    shutil.rmtree(config_dir, ignore_errors=True)
    shutil.copytree(config, config_dir, symlinks=True)
    env = _home(live, config_dir)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(live / "cwd")

    def cli(*args, env=None):
        r = loopx_cli(*args, env={"LOOPX_REGISTRY": cli.url, **(env or {})})
        return Result(r.code, r.out, r.err)

    cli.url = env["LOOPX_REGISTRY"]
    with api.open_registry(cli.url) as registry:
        yield Reproduced(cli, registry, project, out["goal_id"], Path(out["worktree"]), out)


@pytest.fixture(scope="session")
def _reproduced_once(tmp_path_factory):
    """:func:`_template` "reproduced"."""
    return _template(tmp_path_factory, "reproduced")


@pytest.fixture(scope="session")
def _handed_off_once(tmp_path_factory):
    """:func:`_template` "handed_off"."""
    return _template(tmp_path_factory, "handed_off")


@pytest.fixture
def reproduced_goal(_reproduced_once, loopx_cli, tmp_path, monkeypatch) -> Reproduced:
    """A goal started and reproduced on the tiny ``calc`` project, the test's own: a fresh copy of
    the one reproduced for the session (start and reproduce are the same steps in every such test;
    the tests of those steps themselves run them). Its ``cli`` runs in-process, as the ``cli`` fixture."""
    yield from _restore(_reproduced_once, loopx_cli, tmp_path, monkeypatch)


@pytest.fixture
def handed_off_goal(_handed_off_once, loopx_cli, tmp_path, monkeypatch) -> Reproduced:
    """As :func:`reproduced_goal`, the goal fixed (``FIXED``), verified and handed off with the root
    cause "add used subtraction": it waits for the publish gate (``test_issue_fix.to_publish``)."""
    yield from _restore(_handed_off_once, loopx_cli, tmp_path, monkeypatch)

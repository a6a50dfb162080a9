"""Shared fixtures: a registry on every backend, the CLI in-process and as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from loopx.testing import CliResult as Result
from tests import backends

ROOT = Path(__file__).resolve().parent.parent

#: The user directories a test session points at a directory of its own, before anything runs.
USER_DIRS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")


def pytest_configure(config):
    """The whole session - session and module fixtures, every process a test starts - keeps its
    integrity keys, anchors and default registry in a temporary directory, never the user's own
    (``~/.config/loopx/keys``, ``~/.local/share/loopx``). A test may still point them elsewhere."""
    import tempfile

    # Not "loopx-*": that prefix is what a session must leave nothing of (scripts/machine-state.sh,
    # tests/test_testinfra_postgres.py), and a session killed outright never reaches unconfigure.
    base = Path(tempfile.mkdtemp(prefix="pytest-loopx-home-"))
    config._loopx_user_dirs = (base, {v: os.environ.get(v) for v in USER_DIRS})
    for var in USER_DIRS:
        os.environ[var] = str(base / var.lower())


def pytest_unconfigure(config):
    """Put the user directories back and remove the session's own."""
    import shutil

    base, before = getattr(config, "_loopx_user_dirs", (None, {}))
    for var, value in before.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def only_builtin_plugins(monkeypatch):
    """The core suite sees LoopX's built-ins and the plugins a test registers, nothing installed.

    ``LOOPX_PLUGINS`` set to nothing is an empty allow-list: the plugin manager (rebuilt when the
    variable changes) loads no entry point, here and in every ``loopx`` process a test starts, so
    installing a plugin into the same environment changes no core test's result.
    """
    monkeypatch.setenv("LOOPX_PLUGINS", "")


@pytest.fixture(autouse=True)
def private_key_dir(tmp_path, monkeypatch):
    """Integrity keys and rollback anchors (``user_config_dir("loopx")/keys``) in the test's own
    directory, for in-process commands and every real process a test starts."""
    config = tmp_path / "xdg-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return config / "loopx" / "keys"


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    """LoopX's data directory (``user_data_dir("loopx")``: the artifacts a human reviews) in the
    test's own directory too."""
    data = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    return data / "loopx"


@pytest.fixture(autouse=True)
def project_cwd(tmp_path_factory, monkeypatch):
    """Each test starts in an empty directory of its own (beside its ``tmp_path``, which it leaves
    as it was): the project of the goals it creates (``project-prompt create`` defaults to the
    current directory) and of the turns it runs, so that a goal's workspace (loopx/domain/workspace.py)
    is never a worktree of this checkout."""
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory):
    """The new, empty SQLite registry ``registry_url`` copies (made once per worker, on first use)."""
    return backends.SqliteTemplate(tmp_path_factory.mktemp("registry-template"))


@pytest.fixture(params=backends.KINDS)
def registry_url(request, tmp_path, sqlite_template):
    """A fresh, empty registry URL, once per backend (PostgreSQL skips without a server).

    SQLite's is a copy of one made once per worker (:class:`tests.backends.SqliteTemplate`).
    """
    url = backends.fresh_registry(request.param, tmp_path, sqlite_template)
    yield url
    backends.drop_registry(request.param, url)


@pytest.fixture
def sqlite_url(tmp_path):
    """A fresh embedded registry path, for tests that are about SQLite itself."""
    return str(tmp_path / "registry.db")


@pytest.fixture
def reg(registry_url):
    """An open :class:`loopx.ledger.registry.Registry` on ``registry_url``."""
    from loopx.ledger.registry import Registry

    r = Registry.open(registry_url)
    yield r
    r.close()


@pytest.fixture
def loopx(registry_url, monkeypatch):
    """``loopx("project_prompt", "list", "--json", env={...})`` -> :class:`Result`, in-process."""
    from loopx.cli import cli

    monkeypatch.delenv("LOOPX_ACTOR", raising=False)

    def call(*args, env=None, input=None):
        runner = CliRunner()
        full_env = {"LOOPX_REGISTRY": registry_url, **(env or {})}
        r = runner.invoke(cli, [str(a) for a in args], env=full_env, input=input, catch_exceptions=False)
        return Result(r.exit_code, r.stdout, r.stderr)

    call.url = registry_url
    return call


def loopx_env(registry_url: str, **extra) -> dict:
    """Environment for a real ``loopx`` process on ``registry_url``."""
    from loopx.values import clock

    # The test's own LoopX settings never leak in; its scripted clock (``loopx_clock``) does.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_") or k == clock.OFFSET_ENV}
    env["LOOPX_REGISTRY"] = registry_url
    env["LOOPX_PLUGINS"] = ""  # built-ins only (see only_builtin_plugins)
    env.update(extra)
    return env


@pytest.fixture
def loopx_proc(registry_url):
    """``loopx_proc("quota", "should-run", ...)`` -> :class:`Result`, as a real process."""

    def call(*args, env=None, input=None, timeout=120):
        p = subprocess.run(
            [sys.executable, "-m", "loopx", *[str(a) for a in args]],
            env=loopx_env(registry_url, **(env or {})),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Result(p.returncode, p.stdout, p.stderr)

    call.url = registry_url
    return call


@pytest.fixture
def loopx_here(registry_url):
    """``loopx_here(...)``: :func:`loopx_proc`'s call - the same arguments, the environment a real
    process gets - run in this process (``tests/cli_helpers.py``), for a test that checks only
    what the command answers, not the process."""
    from tests.cli_helpers import loopx_in_process

    def call(*args, env=None, input=None):
        return loopx_in_process(*args, env=loopx_env(registry_url, **(env or {})), input=input)

    call.url = registry_url
    return call


def pytest_collection_modifyitems(session, config, items):
    """Files holding tests marked ``slow`` first (in their order, the rest after them): run in
    parallel (scripts/test.sh: ``--dist loadfile``, the quick tier ``worksteal``), the long ones
    start early and the short ones fill in around them, instead of one long file running alone at
    the end."""
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_files)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``LOOPX_TEST_CPU=FILE``, each test's CPU seconds - this process's, and those of the
    processes it started and waited for - and its wall seconds are appended to ``FILE`` (one
    tab-separated line a test: its id, those three, its xdist worker and when it started, so
    each worker's timeline can be drawn again). On a machine others share, wall time says
    little: CPU time says where the suite's time goes (CONTRIBUTING.md, "Tests")."""
    path = os.environ.get("LOOPX_TEST_CPU")
    if not path:
        yield
        return
    import time

    before, started, t0 = os.times(), time.monotonic(), time.time()
    yield
    after = os.times()
    own = after.user - before.user + after.system - before.system
    children = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
    with open(path, "a") as out:
        out.write(f"{item.nodeid}\t{own:.3f}\t{children:.3f}\t{time.monotonic() - started:.3f}\t{worker}\t{t0:.3f}\n")


def pytest_sessionfinish(session, exitstatus):
    """Stop the throwaway PostgreSQL server (if one was started), whatever the outcome."""
    backends.stop_server()

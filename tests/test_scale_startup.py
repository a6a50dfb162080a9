"""The turn-time path imports nothing it does not use: no library beyond the import floor the
start-up budget is measured against (docs/performance.md), PostgreSQL commands no more than the
driver besides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import loopx_env
from tests.factories import make_goal


#: The import floor (bench/timing.py): the libraries LoopX depends on. The start-up budget
#: (docs/performance.md: should-run <= 1.25x the time of importing these) leaves LoopX's own code
#: the rest; any other library a command loads is paid out of it. These are the standard-library
#: modules LoopX's own code needs on the paths below (hashlib: the contract fingerprint, the step
#: journal; socket: the status page's server check; gc: the entry point pauses the collector while
#: the command line is imported, loopx.entry); a new one is a decision, made here.
IMPORT_FLOOR = "import click, pluggy, attrs, cattrs, platformdirs, sqlite3"
ALLOWED_BEYOND_FLOOR = {
    "hashlib", "_hashlib", "_blake2", "_sha256", "json", "json.decoder", "json.encoder", "json.scanner", "_json",
    "contextvars", "_contextvars", "shlex", "struct", "_struct", "fcntl", "heapq", "_heapq", "queue", "_queue",
    "socket", "selectors", "select", "array", "runpy", "gc",
}


def _imported(argv: list[str], env: dict) -> set[str]:
    r = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}


def _beyond_the_floor(argv: list[str], env: dict, *, driver: str = "") -> set[str]:
    """The modules ``loopx ARGV`` imports that are neither the import floor's, LoopX's (core and
    plugins), nor the allowed standard-library modules (nor ``driver``'s package)."""
    floor = _imported(["-c", IMPORT_FLOOR], env)
    _imported(["-m", "loopx", *argv, "--json"], env)  # the entry-point cache filled, if this venv's was stale
    # What every one of up to three runs loads: the entry-point cache is keyed on the mtimes of
    # sys.path's directories, and a test on another worker that writes into one of them (a pip
    # install, a bytecode cache) makes one run scan the entry points (importlib.metadata, email,
    # csv...). A module the command itself loads is loaded by every run, so it is still found.
    beyond: set[str] | None = None
    for _ in range(3):
        found = _imported(["-m", "loopx", *argv, "--json"], env)
        assert "loopx.seam.plugins" in found  # it did load plugins (and so found their cache)
        extra = {m for m in found - floor - ALLOWED_BEYOND_FLOOR
                 if not m.startswith(("loopx", "__editable__")) and not (driver and m.split(".")[0] == driver)
                 and m != "self [us]"}
        beyond = extra if beyond is None else beyond & extra
        if not beyond:
            break
    return beyond or set()


@pytest.mark.parametrize("registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_should_run_on_postgres_loads_the_driver_and_nothing_else_beyond_the_floor(registry_url, loopx):
    """PostgreSQL commands load no more than the driver (its own dependencies included)."""
    goal = make_goal(loopx, title="fast")["goal"]
    env = loopx_env(registry_url)
    driver = _imported(["-c", "import psycopg"], env) - _imported(["-c", IMPORT_FLOOR], env)
    extra = _beyond_the_floor(["quota", "should-run", "--goal-id", goal], env, driver="psycopg") - driver
    assert extra == set()


def test_status_first_page_does_not_load_cattrs(sqlite_url, tmp_path):
    """The overview's page (counts, lanes, quota pictures, last runs) is built from flat values:
    importing cattrs and generating its converters was a fifth of ``status``'s time at 1,000,000
    goals. The page still shows every field (quota limits, grants, used; the last run)."""
    from loopx.views import quota
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="paged")["goal"]
        quota.set_limits(reg, "user", goal_id=goal, values={"max_turns": 3})
    turn = subprocess.run([sys.executable, "-m", "loopx", "quota", "should-run", "--goal-id", goal, "--agent", "tester",
                           "--json"], env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=120)
    assert json.loads(turn.stdout)["interaction_contract"]["run_id"], turn.stderr
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", "status", "--json"],
                       env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "loopx.views.status" in imported
    assert "cattrs" not in imported
    page = json.loads(r.stdout)
    shown = page["goals"][0]
    assert shown["quota"]["limits"]["max_turns"] == 3 and shown["quota"]["used"]["turns"] == 1
    assert shown["last_run"]["agent"] == "tester" and shown["last_run"]["state"] == "open"


def test_should_run_a_write_and_reads_load_no_library_beyond_the_floor(sqlite_url):
    """``quota should-run`` (before every agent turn), a write, and the read commands find the
    integrity key and the entry-point cache through platformdirs (in the floor) and load no other
    library: cattrs, importlib.metadata (the plugin scan), email, asyncio... would each be paid
    out of the 25 % the budget leaves LoopX's own code. The time itself: bench/bench_startup.py."""
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="read", todo_texts=["t"])["goal"]
    env = loopx_env(sqlite_url)
    for argv in (["quota", "should-run", "--goal-id", goal], ["todo", "add", "--goal-id", goal, "--text", "u"],
                 ["todo", "list", "--goal-id", goal], ["status"]):
        assert _beyond_the_floor(argv, env) == set(), argv


@pytest.mark.parametrize("xdg", [None, "/somewhere/cache", "relative/cache"])
def test_the_entry_point_cache_stays_where_platformdirs_puts_it(monkeypatch, tmp_path, xdg):
    import platformdirs

    from loopx.seam import plugins

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert plugins._cache_file().parent == Path(platformdirs.user_cache_dir("loopx", appauthor=False))


def test_should_run_opening_a_run_loads_no_gate_class_and_no_signal(sqlite_url):
    """What opening a run does not need is not loaded: the Gate attrs class on a goal without
    gates (loopx.model builds each area's classes on first use), ``signal`` (its enums) for the
    step limits the contract states. docs/performance.md counts what each cost."""
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="no gates", todo_texts=["t"])["goal"]
    shown = ("signal", "loopx.model.gate", "loopx.model.todo", "loopx.sandbox.limits")
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: print('LOADED', *[m for m in {shown!r} if m in sys.modules], file=sys.stderr))\n"
            "from loopx.entry import main\nsys.argv = ['loopx', *sys.argv[1:]]\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code, "quota", "should-run", "--goal-id", goal, "--agent", "a1", "--json"],
                       env=loopx_env(sqlite_url), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["interaction_contract"]["run_id"]  # it opened a run
    loaded = next(line.split()[1:] for line in r.stderr.splitlines() if line.startswith("LOADED"))
    assert loaded == ["loopx.model.todo", "loopx.sandbox.limits"]  # the todo was read, the limits stated


def test_should_run_loads_neither_the_repair_writing_half_nor_a_queue(sqlite_url):
    """Opening a run asks self-repair's contract veto (its cheap detectors, through the repair
    session) and registers its ``self_repair.repaired`` kind, yet loads neither the writing half of
    the repair API (``loopx.domain.repairs`` and its attrs class) nor the plugin's repair commands;
    the contract hooks' deadline workers take their job without ``queue`` (docs/performance.md,
    "Under the budget"). Read from ``sys.modules`` at exit: ``-X importtime`` leaves out some
    imports made on the hook's worker thread."""
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg, title="lean")["goal"]
    code = ("import atexit, sys; atexit.register(lambda: print('LOADED', *sorted(sys.modules), file=sys.stderr)); "
            "sys.argv = ['loopx', *sys.argv[1:]]; from loopx.entry import main; main()")
    r = subprocess.run([sys.executable, "-c", code, "quota", "should-run", "--goal-id", goal, "--agent", "tester",
                        "--json"], env=loopx_env(sqlite_url, LOOPX_PLUGINS="self_repair"), capture_output=True,
                       text=True, timeout=120)
    assert json.loads(r.stdout)["decision"], r.stderr[-2000:]
    loaded = set(next(line.split()[1:] for line in r.stderr.splitlines() if line.startswith("LOADED")))
    assert {"loopx_self_repair.detectors", "loopx.domain.repair_session", "loopx.seam.hook_guard"} <= loaded
    assert not {"loopx.domain.repairs", "loopx_self_repair.repairs", "queue"} & loaded

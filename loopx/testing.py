"""Pytest fixtures for people writing LoopX plugins (installed as the ``loopx`` pytest plugin).

Installing LoopX registers this module through the ``pytest11`` entry point, so a plugin's own
test suite gets these fixtures without any ``conftest.py``:

``loopx_registry``
    A fresh embedded registry for one test (``LOOPX_REGISTRY`` points at it, so CLI calls in the
    test use it too; its key goes to the test's own ``XDG_CONFIG_HOME``, never the user's).
    ``LOOPX_ACTOR`` is cleared, so code acts as the user unless told otherwise.
``loopx_plugin``
    ``loopx_plugin(obj, name=None)`` registers a plugin object for the duration of one test and
    always unregisters it afterwards, also removing any commands it added to the CLI.
``loopx_cli``
    ``loopx_cli("capabilities", "list", "--json")`` runs the ``loopx`` command line in-process
    on ``loopx_registry`` and returns a :class:`CliResult` (``code``, ``out``, ``err``, ``json``).
``loopx_status_server``
    The read-only status server on ``loopx_registry`` (127.0.0.1, a free port), in a thread: its
    base URL, for HTTP checks of the dashboard and ``/api``.
``loopx_clock``
    LoopX's wall clock, moved by the test instead of waited for: ``loopx_clock.advance(3600)``
    moves it in this process and in every ``loopx`` process the test starts afterwards or has
    running (``LOOPX_CLOCK_OFFSET_FILE``, set for the test; see :mod:`loopx.values.clock`). A lease, a
    claim's TTL or a cadence passes at once; durations (time-outs) still run on the real clock.

:func:`wait_until` polls a condition another process brings about, with a deadline: the one way
a test waits (never a fixed ``sleep``); :func:`signal_delivered` is one such condition.

A typical test::

    def test_my_capability(loopx_registry, loopx_plugin, loopx_cli):
        loopx_plugin(MyPlugin())
        r = loopx_cli("my-command", "--json")
        assert r.code == 0, r
        assert r.json["ok"]

:func:`capability_doc_problems` checks a capability's document against its declaration, for a
plugin's own "my doc is complete" test.
"""

from __future__ import annotations

import json

import pytest


class CliResult:
    """What one CLI call gave: exit ``code``, ``out`` (stdout), ``err`` (stderr), and ``json``."""

    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self):
        """stdout parsed as JSON."""
        return json.loads(self.out)

    def __repr__(self):
        return f"CliResult(code={self.code}, out={self.out[:2000]!r}, err={self.err[:2000]!r})"


@pytest.fixture
def loopx_registry(tmp_path, tmp_path_factory, monkeypatch):
    """A fresh, empty SQLite registry; ``LOOPX_REGISTRY`` points at it for the test, and its
    integrity key lives in the test's own config directory (``XDG_CONFIG_HOME``), never the user's.
    The test runs in an empty directory of its own: the project of a goal it makes without one
    (a goal's workspace is never a worktree of the checkout the tests run from)."""
    from loopx.ledger.registry import Registry

    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    path = tmp_path / "registry.db"
    monkeypatch.setenv("LOOPX_REGISTRY", str(path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("LOOPX_ACTOR", raising=False)
    reg = Registry.open(str(path))
    try:
        yield reg
    finally:
        reg.close()


@pytest.fixture
def loopx_plugin():
    """``register(plugin, name=None)``: add a plugin object for this test only.

    The plugin's hooks take part in everything the test does (capability declarations, contract
    vetoes and actions, commands). On teardown it is unregistered and the CLI's command table is
    restored, so the next test sees LoopX exactly as installed.
    """
    from loopx.cli import cli
    from loopx.seam.plugins import get_plugin_manager

    pm = get_plugin_manager()
    commands_before = dict(cli.commands)
    # Both marks of the CLI's plugin-command table (which manager it was loaded for, and that the
    # load finished) are put back with the table, or the CLI would trust a table it no longer has.
    marks = ("_plugin_commands_of", "_plugin_commands_ready")
    loaded_before = {mark: cli.__dict__.get(mark) for mark in marks}
    added = []

    def register(plugin, name=None):
        if pm.is_registered(plugin):
            # Already loaded (the package under test is installed, so its entry point loaded it):
            # its hooks take part already, and it stays registered after the test.
            return plugin
        added.append(pm.register(plugin, name=name))
        pm.check_pending()
        if cli.__dict__.get("_plugin_commands_of") is pm:
            # The CLI already asked this manager's plugins for their commands; ask this one now.
            from loopx.seam.plugins import hooks

            hooks().register_commands(cli, only=plugin)
        return plugin

    yield register
    for name in added:
        if pm.has_plugin(name):
            pm.unregister(name=name)
    cli.commands.clear()
    cli.commands.update(commands_before)
    for mark, value in loaded_before.items():
        if value is None:
            cli.__dict__.pop(mark, None)
        else:
            setattr(cli, mark, value)


@pytest.fixture
def loopx_status_server(loopx_registry):
    """The read-only status server on ``loopx_registry``, on 127.0.0.1 and a free port, in a
    thread for the test: its base URL (``http://127.0.0.1:PORT``), for a plugin's HTTP checks of
    what the dashboard and ``/api`` show."""
    import threading

    from loopx.status_server import make_server

    srv = make_server(str(loopx_registry.store.url), host="127.0.0.1", port=0, poll_interval=0.1)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown_all()


@pytest.fixture
def loopx_cli(loopx_registry):
    """``loopx_cli(*args, env=None, input=None)`` -> :class:`CliResult`, run in-process on ``loopx_registry``."""
    from click.testing import CliRunner

    from loopx.cli import cli

    def call(*args, env=None, input=None):
        runner = CliRunner()
        full_env = {"LOOPX_REGISTRY": str(loopx_registry.store.url), **(env or {})}
        r = runner.invoke(cli, [str(a) for a in args], env=full_env, input=input, catch_exceptions=False)
        return CliResult(r.exit_code, r.stdout, r.stderr)

    return call


def wait_until(condition, what: str, timeout: float = 60.0, interval: float = 0.05):
    """Call ``condition()`` until it returns something true, and return that.

    For what another process does (a file written, a row committed, a process gone), never for
    time to pass (move :func:`loopx_clock` instead). ``timeout`` is a generous deadline, not a
    measurement: past it the test fails with ``AssertionError("timed out waiting for <what>")``.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({timeout:g} s)")
        time.sleep(interval)


def signal_delivered(pid: int, sig: int) -> bool:
    """Whether ``sig``, sent to process ``pid``, has been taken by it (Linux: no longer pending).

    A Python process runs its handler before the next line of Python its main thread executes,
    so once delivered, whatever it does next already knows of the signal. A process that is gone
    has taken it too.
    """
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return True
    bit = 1 << (int(sig) - 1)
    return not any(int(fields.get(k, "0").strip() or "0", 16) & bit for k in ("SigPnd", "ShdPnd"))


class ScriptedClock:
    """LoopX's wall clock for one test: this process's and every ``loopx`` process's it starts."""

    def __init__(self, path):
        self.path = str(path)
        self.offset = 0.0
        self._write()

    @property
    def env(self) -> dict:
        """The environment a ``loopx`` process needs to follow this clock (set for the test already)."""
        from loopx.values import clock

        return {clock.OFFSET_ENV: self.path}

    def set(self, seconds: float) -> None:
        """Put the clock ``seconds`` away from the real time (negative: in the past)."""
        self.offset = float(seconds)
        self._write()

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on."""
        self.set(self.offset + float(seconds))

    def _write(self) -> None:
        import os

        from loopx.values import clock

        clock.set_offset(self.offset)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(repr(self.offset))
        os.replace(tmp, self.path)  # a process reading it sees the old offset or the new one


@pytest.fixture
def loopx_clock(tmp_path, monkeypatch):
    """A :class:`ScriptedClock` at the real time; back to the real time after the test."""
    from loopx.values import clock

    moved = ScriptedClock(tmp_path / "loopx-clock-offset")
    monkeypatch.setenv(clock.OFFSET_ENV, moved.path)
    try:
        yield moved
    finally:
        clock.set_offset(0)


def capability_doc_problems(name: str, doc_root=".") -> list[str]:
    """Problems with the installed capability ``name``'s document (``doc_root``/its ``doc`` path).

    Empty when the document exists, has every required section, and lists the namespaces,
    actions and quota needs the declaration has. Use it in a plugin's own tests.
    """
    from pathlib import Path

    from loopx.seam import capabilities

    cap = capabilities.get(name)
    path = Path(doc_root) / cap.doc
    if not path.is_file():
        return [f"{path} does not exist"]
    return capabilities.check_doc(cap, path.read_text(encoding="utf-8"))


#: The LoopX modules a plugin may import (its tests: these and ``loopx.testing``).
ALLOWED_IMPORTS = ("loopx", "loopx.api")


def check_plugin_imports(package_dir, *, tests: bool = False) -> list[str]:
    """Every import of a LoopX module other than ``loopx.api`` (and ``loopx`` for ``hookimpl``)
    in the Python files under ``package_dir``, as ``"path:line: what"``; empty when clean.
    ``tests``: ``package_dir`` holds a plugin's tests, which may import ``loopx.testing`` too.

    Walks the syntax trees, so imports inside functions count too. Run it in your plugin's tests:
    ``assert loopx.api.testing.check_plugin_imports(Path(my_plugin.__file__).parent) == []``. A check
    that could not look is not a pass: a path that does not exist, a directory without Python
    files, or a file that does not parse is a problem too.
    """
    import ast
    from pathlib import Path

    problems = []
    root = Path(package_dir)
    if not root.exists():
        return [f"{root}: does not exist (nothing was checked)"]
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    if root.is_file():
        root = root.parent
    if not files:
        return [f"{root}: holds no Python files (nothing was checked)"]
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{path.relative_to(root.parent)}: cannot be read as Python ({exc}); not checked")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [(node.module, [a.name for a in node.names])]
            else:
                continue
            for module, members in names:
                if module != "loopx" and not module.startswith("loopx."):
                    continue
                if module == "loopx.api" or (tests and module == "loopx.testing"):
                    continue
                allowed = {"hookimpl", "api", "__version__", *(("testing",) if tests else ())}
                if module == "loopx" and (members is None or set(members) <= allowed):
                    continue
                what = f"from {module} import {', '.join(members)}" if members else f"import {module}"
                problems.append(f"{path.relative_to(root.parent)}:{node.lineno}: {what}")
    return problems


# --------------------------------------------------------------------------- damaging a registry


def tamper_sqlite(reg, *statements, reseal: bool = True) -> None:
    """Damage an SQLite registry behind LoopX's back: each ``(sql, params)`` of ``statements``
    run on its file directly, as someone with ``sqlite3`` would.

    ``reseal`` (the default) then re-chains and re-seals every goal and moves the rollback anchor
    to the registry as it stands, as migrating a registry an older LoopX damaged would: the
    damage predates the hash chain, so only a repair capability's own detectors can find it.
    ``reseal=False`` leaves the damage for the integrity checks to find.
    """
    import sqlite3

    con = sqlite3.connect(reg.store.path)
    try:
        for sql, params in statements:
            con.execute(sql, params)
        con.commit()
    finally:
        con.close()
    if not reseal:
        return
    from loopx.ledger import integrity
    from loopx.ledger.rekey import anchor_as_it_stands
    from loopx.store.queries.ledger import ledger_goals

    def work(tx):
        for r in ledger_goals(tx):
            integrity.rechain(tx, r["goal_id"], 1)
            integrity.seal(tx, r["goal_id"])

    reg.store.write(work)
    anchor_as_it_stands(reg)  # re-chained, the newest events have new hashes


def old_sqlite_registry(path) -> int:
    """Make ``path`` an SQLite registry as the first LoopX left it (schema version 1, no goals),
    for a test of what meets an old registry; returns that version."""
    from loopx.store.queries.ledger_old import make_v1_sqlite

    return make_v1_sqlite(path)


def forbid_ledger_replay(monkeypatch) -> None:
    """Make any replay of a goal's ledger fail the test (``monkeypatch``: pytest's fixture), for
    a test that a path is cheap: a check that must never replay history, whatever its length."""
    from loopx.ledger import log as ledger

    def no_replay(*_args, **_kw):
        raise AssertionError("this path must not replay the ledger")

    monkeypatch.setattr(ledger, "replay", no_replay)


def landlock_step(registry_url: str, workdir: str):
    """A turn's confinement built with Landlock alone (no mount namespace), as an unprivileged user
    on a kernel without user namespaces gets it: for a plugin's tests of what that policy lets a
    step write. Returns the core's ``Step`` (``run_command`` confines a child under it)."""
    from loopx.turn import confine

    return confine.Step(registry_url=registry_url, workdir=workdir, backend="landlock")

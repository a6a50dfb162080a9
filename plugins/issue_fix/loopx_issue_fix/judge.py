"""LoopX's test judge: an independent record of every test's outcome, inside the test interpreter.

Copied by :mod:`loopx_issue_fix.testrun` next to the probe (as ``_loopx_issue_fix_judge.py``) and
registered by it as a pytest plugin before any conftest or test module is imported. It does not
believe pytest's reports (``CallInfo``, ``TestReport``: objects the code under test can patch):

- a hook wrapper innermost around ``pytest_runtest_call`` (inside ``CallInfo.from_call``) sees
  what ``item.runtest()`` itself raised (or, for a unittest case, what it left in ``_excinfo``),
  and notes a test whose own code never ran;
- it snapshots pytest's and pluggy's reporting machinery (``CallInfo.from_call``,
  ``call_and_report``, ``TestReport``, ``runtestprotocol``, the terminal reporter, the session's
  failure count, JUnit's reporter, pluggy's call loop, ``os.write``, its own methods) once the
  installed plugins are loaded and before the first conftest, checks the core of it after every
  test and all of it at the end;
- it writes one line per test (``[nodeid, raw outcome, pytest's outcome]``) and a last
  line (pytest's exit status, its counts, what changed) to a pipe LoopX opened before the
  interpreter started (its descriptor number is all it is given: no path to find by name), and
  checks before each write that the descriptor is still that pipe.

LoopX compares the lines with pytest's own results, its JUnit XML and the process's exit status
(:mod:`loopx_issue_fix.verdict`). Everything here runs in the same process as the code under
test: a determined attacker who knows this file can still forge it (docs/security.md says what
it does and does not stop). Only the standard library and pytest are imported.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Generator

import pytest

if TYPE_CHECKING:  # the project's interpreter may be older than LoopX's: types are for the checker only
    #: One looked-up object: ``(namespace, name, value, function, code, label)`` (see :func:`_entry`).
    Entry = tuple[dict[str, Any], str, Any, Any, Any, str]

#: Checked after every test: the objects a patch that turns failures into passes goes through.
CORE = (
    ("_pytest.runner", ("CallInfo", "from_call"), ("call_and_report",), ("runtestprotocol",),
     ("pytest_runtest_protocol",), ("pytest_runtest_makereport",), ("pytest_runtest_call",), ("CallInfo",),
     ("TestReport",), ("check_interactive_exception",)),
    ("_pytest.reports", ("TestReport", "from_item_and_call"), ("TestReport", "__init__"), ("BaseReport", "passed"),
     ("BaseReport", "failed"), ("BaseReport", "skipped"), ("TestReport",)),
    ("_pytest.main", ("Session", "pytest_runtest_logreport"), ("pytest_runtestloop",), ("wrap_session",)),
    ("_pytest.terminal", ("TerminalReporter", "pytest_runtest_logreport"), ("TerminalReporter", "summary_stats"),
     ("TerminalReporter", "build_summary_stats_line")),
    ("_pytest.junitxml", ("LogXML", "pytest_runtest_logreport")),
    ("_pytest.python", ("Function", "runtest"), ("pytest_pyfunc_call",)),
    ("_pytest.unittest", ("TestCaseFunction", "runtest"), ("pytest_runtest_makereport",)),
    ("_pytest.skipping", ("pytest_runtest_makereport",), ("pytest_runtest_call",)),
    ("pluggy._callers", ("_multicall",)),
    ("pluggy._hooks", ("HookCaller", "__call__")),
    ("pluggy._manager", ("PluginManager", "_hookexec")),
    ("_pytest.config", ("main",)),
    ("os", ("write",), ("fstat",)),
)
#: Checked at the end: every function and class of these modules, and every method of their classes.
BROAD = ("_pytest.runner", "_pytest.reports", "_pytest.main", "_pytest.terminal", "_pytest.junitxml",
         "_pytest.python", "_pytest.unittest", "_pytest.skipping", "_pytest.outcomes", "_pytest.nodes",
         "pluggy._callers", "pluggy._hooks", "pluggy._manager", "pluggy._result")
#: The judge's own tools, as they were when this file was imported (before any project code).
_WRITE, _FSTAT = os.write, os.fstat
#: Lines kept before a write (a write per test would wake LoopX's reader 1,500 times a run).
BATCH = 256


def _entry(owner: Any, name: str) -> Entry:
    """``(namespace, name, value, function, code, label)``: what ``owner.name`` is now, looked up in the
    owner's own namespace (a class's ``__dict__``, a module's globals), with the function behind it."""
    namespace = vars(owner)
    value = namespace.get(name)
    inner = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
    code = getattr(inner, "__code__", None)
    label = f"{getattr(owner, '__qualname__', None) or getattr(owner, '__name__', '?')}.{name}"
    return namespace, name, value, inner if code is not None else None, code, label


def _resolve(spec: tuple[tuple[Any, ...], ...]) -> list[Entry]:
    out: list[Entry] = []
    for module_name, *paths in spec:
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = __import__(module_name, fromlist=["_"])
            except ImportError:
                continue
        for path in paths:
            owner: Any = module
            for part in path[:-1]:
                owner = getattr(owner, part, None)
            if owner is not None and vars(owner).get(path[-1]) is not None:
                out.append(_entry(owner, path[-1]))
    return out


def _broad() -> list[Entry]:
    out: list[Entry] = []
    for module_name in BROAD:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            if callable(value) and not name.startswith("__"):
                out.append(_entry(module, name))
                if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
                    for attr, member in list(vars(value).items()):
                        if callable(member) or hasattr(member, "__func__") or hasattr(member, "fget"):
                            out.append(_entry(value, attr))
    return out


def _changed(entries: list[Entry]) -> list[str]:
    """The labels of ``entries`` whose object was replaced or whose function's code was swapped
    (a classmethod's ``__func__`` and a property's ``fget`` are read-only: their code is what can change)."""
    return [label for namespace, name, value, inner, code, label in entries
            if namespace.get(name) is not value or (inner is not None and inner.__code__ is not code)]


class Judge:
    """The pytest plugin (see the module's docstring). ``cases`` and ``errors`` are the probe's
    record of what pytest reported (its collector's), read here after each test."""

    def __init__(self, fd: int, cases: dict[str, Any], errors: dict[str, Any]) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.pipe = (st.st_dev, st.st_ino)
        self.cases, self.errors = cases, errors
        self.lines: list[str] = []
        self.raw: dict[str, str] = {}
        self.changed: list[str] = []
        self.core: list[Entry] = []
        self.everything: list[Entry] = []
        self.config: Any = None
        self.session: Any = None
        self.write = os.write
        self.fstat = os.fstat
        import _pytest.outcomes as outcomes

        self.skips = tuple(c for c in (getattr(outcomes, "Skipped", None), getattr(outcomes, "XFailed", None))
                           if c is not None)
        self.keys = frozenset(vars(self)) | {"keys"}

    # The baseline: installed plugins are loaded, no conftest or test module is imported yet.
    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(self, early_config: Any) -> None:
        self.config = early_config
        own = [(Judge, n) for n, v in vars(Judge).items() if callable(v)]
        self.core = _resolve(CORE) + [_entry(o, n) for o, n in own] + [_entry(early_config.pluginmanager,
                                                                              "_inner_hookexec")]
        self.everything = _broad()

    def pytest_sessionstart(self, session: Any) -> None:
        self.session = session

    # Innermost around the test itself: inside CallInfo.from_call, below every other wrapper.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: Any) -> Generator[None, Any, Any]:
        try:
            result = yield
        except BaseException as exc:
            self.raw[item.nodeid] = self._status(exc)
            raise
        left = getattr(item, "_excinfo", None)  # unittest: failures are collected, not raised
        self.raw[item.nodeid] = self._status(getattr(left[0], "value", None) or Exception()) if left else "passed"
        return result

    def _status(self, exc: BaseException) -> str:
        if isinstance(exc, self.skips) or type(exc).__name__ == "SkipTest":
            return "skipped"
        return "failed"

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        # "nocall": the test's own code never ran (a set-up error or skip; pytest must not say passed).
        said = self.cases.get(nodeid)
        self._line([nodeid, self.raw.pop(nodeid, "nocall"), said["status"] if said else None])
        self._check(self.core)

    def _check(self, entries: list[Entry]) -> None:
        found = _changed(entries)
        if vars(self).keys() != self.keys:  # a method shadowed on the instance
            found.append("Judge instance: " + ", ".join(sorted(set(vars(self)) ^ self.keys)))
        if self.write is not _WRITE or self.fstat is not _FSTAT:
            found.append("Judge.write")
        for name in found:
            if name not in self.changed:
                self.changed.append(name)

    def _line(self, value: Any) -> None:
        import json

        self.lines.append(json.dumps(value))
        if len(self.lines) >= BATCH:
            self.flush()

    def flush(self) -> None:
        data, self.lines = ("\n".join(self.lines) + "\n").encode() if self.lines else b"", []
        try:
            st = self.fstat(self.fd)
            if (st.st_dev, st.st_ino) != self.pipe:
                return  # not our pipe any more: write nothing there (LoopX sees the lines missing)
            while data:
                data = data[self.write(self.fd, data):]
        except OSError:
            pass  # closed: LoopX sees the lines (and the last one) missing

    def finish(self, exit_status: int) -> None:
        """The last line: pytest's exit status, its failure counts, and what changed."""
        self._check(self.core + self.everything)
        session_failed: int | None = None
        stats: dict[str, int] | None = None
        if self.config is not None:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                stats = {k: len(v) for k, v in terminal.stats.items() if k in ("passed", "failed", "error")}
            session_failed = getattr(self.session, "testsfailed", None)
        failing = sum(1 for c in self.cases.values() if c["status"] in ("failed", "error")) + len(self.errors)
        self._line({"end": True, "exit_status": exit_status, "failing": failing, "testsfailed": session_failed,
                    "stats": stats, "changed": self.changed[:50], "unfinished": sorted(self.raw)[:50]})
        self.flush()

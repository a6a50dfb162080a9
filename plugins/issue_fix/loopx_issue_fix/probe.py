"""LoopX's pytest probe: runs *inside* the test interpreter, next to the project's tests.

Copied by :mod:`loopx_issue_fix.testrun` into a directory of LoopX's own (as
``_loopx_issue_fix_probe.py``) and started with ``python -I -B -c BOOT``: the interpreter
ignores ``PYTHON*`` variables, the user site and the current directory. :func:`main` then

- installs an audit hook (``sys.addaudithook``) that records every file opened under the
  checkout (the base run's list guards the data files the tests read), and every file opened
  outside the checkout, the run's own directory and the interpreter's installation (code or
  data imported from elsewhere: a base run is reused only while they are unchanged);
- imports pytest from the interpreter's own site-packages *before* the checkout joins
  ``sys.path`` (a ``pytest.py`` in the code under test cannot stand in for it);
- points ``sys.pycache_prefix`` at the run's own bytecode directory (when LoopX gives one), and
  writes bytecode there only when told to (the base run; see :mod:`loopx_issue_fix.bytecode`);
- runs ``pytest.main`` with a collector plugin that keeps every test id's outcome and every
  collection error, and writes them with pytest's exit status to a JSON file;
- and, given a descriptor, with LoopX's judge (:mod:`loopx_issue_fix.judge`), registered with the
  collector before any conftest or test module is imported: the independent record.

Only the standard library and pytest are imported here: this file runs in the project's
interpreter, not LoopX's.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_PREFIXES: tuple[str, ...] = ()
#: Where an opened file is neither the tree's nor "outside": the run's own directory, the
#: interpreter's installation, and kernel file systems.
_SKIP: tuple[str, ...] = ("/proc/", "/dev/", "/sys/")
#: At most this many files outside are recorded (more: the run is not reused).
MAX_OUTSIDE = 5000
OPENED: set[str] = set()
OUTSIDE: set[str] = set()
CASES: dict[str, dict[str, Any]] = {}
COLLECTION_ERRORS: dict[str, str] = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not args:
        return
    path = args[0]
    if isinstance(path, int):
        return
    try:
        full = os.path.abspath(os.fsdecode(path))
    except Exception:  # noqa: BLE001 - an audit hook must never raise
        return
    for prefix in _PREFIXES:
        if full.startswith(prefix):
            OPENED.add(full[len(prefix):])
            return
    _outside(full)


def _outside(full: str) -> None:
    if not full.startswith(_PREFIXES + _SKIP) and len(OUTSIDE) <= MAX_OUTSIDE:
        OUTSIDE.add(full)


def _imported_outside() -> None:
    """Every imported module's source outside the tree and installation: a module read from
    bytecode (installed beside it, or copied into the run's cache) never opens its source."""
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            _outside(os.path.abspath(path))


def _message(report: Any) -> str | None:
    try:
        text = report.longreprtext or ""
    except Exception:  # noqa: BLE001
        text = str(report.longrepr or "")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else None


class Collector:
    """Keeps the outcome of every test id, as pytest reports it."""

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            status = "passed" if report.passed else "skipped" if report.skipped else "failed"
        elif report.failed:
            status = "error"
        elif report.skipped:
            status = "skipped"
        else:
            status = "passed"
        prev = CASES.get(report.nodeid)
        if prev is None or _RANK[status] > _RANK[prev["status"]]:
            CASES[report.nodeid] = {"status": status, "message": _message(report) if status != "passed" else None,
                                    "file": report.nodeid.split("::", 1)[0]}

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            COLLECTION_ERRORS[report.nodeid or "<session>"] = _message(report) or "collection error"


def _installed_bytecode_outside(root: str) -> None:
    """Modules outside the checkout keep using their installed bytecode where it exists (as without
    a prefix): only the checkout's modules, and what has no bytecode yet, go through the cache.
    Only speed depends on this (the stdlib and site-packages are not compiled again into every
    base run's cache); without the hook's target everything goes through the cache."""
    import importlib._bootstrap_external as external

    real = getattr(external, "cache_from_source", None)
    if real is None:
        return
    inside = tuple(_PREFIXES)

    def cache_from_source(path: str, debug_override: bool | None = None, *, optimization: Any = None) -> str:
        cached: str = real(path, debug_override, optimization=optimization)
        if os.path.abspath(path).startswith(inside):
            return cached
        saved = sys.pycache_prefix
        sys.pycache_prefix = None
        try:
            installed: str = real(path, debug_override, optimization=optimization)
        finally:
            sys.pycache_prefix = saved
        return installed if os.path.exists(installed) else cached

    setattr(external, "cache_from_source", cache_from_source)  # (typeshed types it as the stdlib's own)
    _installed_rewrites_outside(inside)


def _installed_rewrites_outside(inside: tuple[str, ...]) -> None:
    """The same for pytest's assertion rewriting (it keeps its own ``*-pytest-X.pyc``, found through
    ``sys.pycache_prefix`` too): a pytest plugin installed outside the checkout (hypothesis, anyio
    ...) reads the rewritten bytecode installed beside it, as a plain pytest run does, instead of
    being rewritten again into every base run's cache. pytest checks that bytecode against its
    source's mtime and size either way; inside the checkout nothing changes."""
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return
    real = getattr(rewrite, "get_cache_dir", None)
    tail = getattr(rewrite, "PYC_TAIL", None)
    if real is None or tail is None:
        return

    def get_cache_dir(file_path: Any) -> Any:
        cached = real(file_path)
        if str(file_path).startswith(inside):
            return cached
        installed = file_path.parent / "__pycache__"
        return installed if (installed / (file_path.name[:-3] + tail)).exists() else cached

    rewrite.get_cache_dir = get_cache_dir


def main() -> int:
    """``BOOT ROOT RESULTS ADD_ROOT PYCACHE WRITE JUDGE_FD [pytest args...]``: run pytest, write RESULTS;
    pytest's exit status. ``PYCACHE`` is the bytecode directory (``-``: none), ``WRITE`` ``1`` to write
    into it, ``JUDGE_FD`` the judge's pipe (``-``: no judge)."""
    global _PREFIXES
    root, results, add_root, args = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[7:]
    judge_fd = None if sys.argv[6] == "-" else int(sys.argv[6])
    pycache, write = sys.argv[4], sys.argv[5] == "1"
    global _SKIP
    _PREFIXES = tuple({os.path.abspath(root) + os.sep, os.path.realpath(root) + os.sep})
    own = [os.path.dirname(os.path.abspath(root)), sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    _SKIP = tuple({d.rstrip(os.sep) + os.sep for p in own for d in (os.path.abspath(p), os.path.realpath(p))}) + _SKIP
    sys.addaudithook(_audit)
    import pytest  # from site-packages, before the checkout is on sys.path

    plugins: list[object] = [Collector()]
    judge = None
    if judge_fd is not None:
        import _loopx_issue_fix_judge  # type: ignore[import-not-found]  # judge.py, copied beside this file

        judge = _loopx_issue_fix_judge.Judge(judge_fd, CASES, COLLECTION_ERRORS)
        plugins.append(judge)
    if pycache != "-":

        class Bytecode:
            # Once pytest has loaded its plugins (their installed bytecode; compiling them into an
            # empty cache would cost the base run more than the cache saves), before the first
            # conftest: from here on the tests, the code under test and what they import use the cache.
            @pytest.hookimpl(tryfirst=True)
            def pytest_load_initial_conftests(self) -> None:
                sys.pycache_prefix = pycache
                sys.dont_write_bytecode = not write
                _installed_bytecode_outside(root)

        plugins.append(Bytecode())
    if add_root:  # what `python -m pytest` does: the current directory first on sys.path
        sys.path.insert(0, root)
    sys.argv = ["pytest", *args]
    code = int(pytest.main(args, plugins=plugins))
    if judge is not None:
        judge.finish(code)
    _imported_outside()
    with open(results, "w", encoding="utf-8") as fh:
        json.dump({"exit_status": code, "cases": CASES, "collection_errors": COLLECTION_ERRORS,
                   "opened": sorted(OPENED), "outside": sorted(OUTSIDE)[:MAX_OUTSIDE],
                   "outside_truncated": len(OUTSIDE) > MAX_OUTSIDE}, fh)
    return code

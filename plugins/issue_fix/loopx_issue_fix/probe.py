"""LoopX's pytest probe: runs *inside* the test interpreter, next to the project's tests.

Copied by :mod:`loopx_issue_fix.testrun` into a directory of LoopX's own (as
``_loopx_issue_fix_probe.py``) and started with ``python -I -B -c BOOT``: the interpreter
ignores ``PYTHON*`` variables, the user site and the current directory. :func:`main` then

- installs an audit hook (``sys.addaudithook``) that records every file opened under the
  checkout (the base run's list guards the data files the tests read);
- imports pytest from the interpreter's own site-packages *before* the checkout joins
  ``sys.path`` (a ``pytest.py`` in the code under test cannot stand in for it);
- runs ``pytest.main`` with a collector plugin that keeps every test id's outcome and every
  collection error, and writes them with pytest's exit status to a JSON file.

Only the standard library and pytest are imported here: this file runs in the project's
interpreter, not LoopX's.
"""

import json
import os
import sys

_PREFIXES = ()
OPENED = set()
CASES = {}
COLLECTION_ERRORS = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _audit(event, args):
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


def _message(report):
    try:
        text = report.longreprtext or ""
    except Exception:  # noqa: BLE001
        text = str(report.longrepr or "")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else None


class Collector:
    """Keeps the outcome of every test id, as pytest reports it."""

    def pytest_runtest_logreport(self, report):
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

    def pytest_collectreport(self, report):
        if report.failed:
            COLLECTION_ERRORS[report.nodeid or "<session>"] = _message(report) or "collection error"


def main():
    """``BOOT ROOT RESULTS ADD_ROOT [pytest args...]``: run pytest, write RESULTS; pytest's exit status."""
    global _PREFIXES
    root, results, add_root, args = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
    _PREFIXES = tuple({os.path.abspath(root) + os.sep, os.path.realpath(root) + os.sep})
    sys.addaudithook(_audit)
    import pytest  # noqa: F401 - from site-packages, before the checkout is on sys.path

    if add_root:  # what `python -m pytest` does: the current directory first on sys.path
        sys.path.insert(0, root)
    sys.argv = ["pytest", *args]
    code = int(pytest.main(args, plugins=[Collector()]))
    with open(results, "w", encoding="utf-8") as fh:
        json.dump({"exit_status": code, "cases": CASES, "collection_errors": COLLECTION_ERRORS,
                   "opened": sorted(OPENED)}, fh)
    return code

"""Whether a test run's records agree: the judge's pipe, pytest's results, its JUnit XML, the exit status.

A run LoopX starts itself (a plain pytest command) leaves four records of the same run:

- the judge's lines (:mod:`loopx_issue_fix.judge`), read by LoopX from a pipe it opened before
  the interpreter started: what each test's ``runtest()`` raised, what pytest reported for it,
  and at the end pytest's exit status, its failure counts and any change to its machinery;
- the probe's results file (every test id's outcome as pytest reported it, and the exit status);
- pytest's own JUnit XML, written to the run's private directory;
- the test process's exit status, which the kernel gives LoopX.

:func:`tampering` lists every disagreement; one is enough for the run not to count (verify:
``issue_fix.runner_tampered``). The last two cannot be forged without forging the first two
consistently, and the first is written where the code under test has no name to find it by.
"""

from __future__ import annotations

import json
from typing import Any

#: At most this many bytes of judge lines are kept (a run writing more is not believed).
MAX_BYTES = 64 << 20


def read_lines(data: bytes) -> tuple[dict[str, Any], dict[str, Any] | None, list[str]]:
    """``(tests {nodeid: [raw, pytest]}, the last line or None, problems)`` from the pipe's bytes."""
    tests, end, problems = {}, None, []
    for n, line in enumerate(data.splitlines(), 1):
        try:
            value = json.loads(line)
        except ValueError:
            problems.append(f"line {n} of the judge's pipe is not the judge's")
            continue
        if end is not None:
            problems.append("the judge's pipe holds lines after its last one")
            break
        if isinstance(value, dict) and value.get("end") is True:
            end = value
        elif isinstance(value, list) and len(value) == 3 and isinstance(value[0], str) and value[0] not in tests:
            tests[value[0]] = value[1:]
        else:
            problems.append(f"line {n} of the judge's pipe is not the judge's (a test recorded twice, or forged)")
    return tests, end, problems


def tampering(data: bytes, report: dict[str, Any], junit: dict[str, Any] | None, exit_code: int | None,
              timed_out: bool) -> list[str]:
    """Every disagreement between the four records of one run (see the module's docstring); ``[]``
    when they agree. A run that timed out or crashed before pytest finished is left to the usual
    checks (no results: not a test failure) unless it *exited 0*, which no crash does. ``junit``
    ``None``: the run wrote none (a base run)."""
    if timed_out:
        return []
    tests, end, problems = read_lines(data[:MAX_BYTES])
    if len(data) > MAX_BYTES:
        problems.append("the judge's pipe holds more than a run writes")
    if end is None:
        if exit_code == 0 or report.get("found"):
            problems.append(f"the test process exited {exit_code} but pytest never finished in the judge's record "
                            "(os._exit, or the judge's pipe closed or replaced)")
        return problems
    if end.get("changed"):
        problems.append(f"pytest's reporting machinery was changed during the run: {', '.join(end['changed'][:8])}")
    status = end.get("exit_status")
    if status != exit_code:
        problems.append(f"pytest returned exit status {status} but the test process exited {exit_code}")
    if status not in (0, 1):
        return problems  # interrupted, internal or usage error, no tests: not a test run (checked elsewhere)
    if end.get("unfinished"):
        problems.append(f"test(s) started but never finished: {', '.join(end['unfinished'][:5])}")
    hidden = [i for i, (raw, said) in tests.items() if said == "passed" and raw != "passed"]
    if hidden:
        problems.append(f"{len(hidden)} test(s) raised (or never ran) but were reported passed: {', '.join(hidden[:5])}")
    unreported = [i for i, (_r, said) in tests.items() if said is None]
    if unreported:
        problems.append(f"{len(unreported)} test(s) ran without a report: {', '.join(unreported[:5])}")
    failing, counted, stats = end["failing"], end.get("testsfailed"), end.get("stats")
    if (failing > 0) != (status == 1):
        problems.append(f"pytest exited {status} with {failing} failing test(s) and collection error(s)")
    if counted is not None and (counted > 0) != (failing > 0):
        problems.append(f"the session counted {counted} failure(s), its reports {failing}")
    if stats is not None and counted is not None and stats.get("failed", 0) + stats.get("error", 0) != counted:
        problems.append(f"the terminal reporter counted {stats.get('failed', 0)} failed and {stats.get('error', 0)} "
                        f"error(s), the session {counted}")
    if report.get("found"):
        cases = report["cases"]
        if report.get("exit_status") != status:
            problems.append(f"the results file says exit status {report.get('exit_status')}, pytest returned {status}")
        differ = sorted(i for i in set(cases) | set(tests)
                        if (cases.get(i) or {}).get("status") != (tests.get(i) or [None, None])[1])
        if differ:
            problems.append(f"the results file and the judge disagree on {len(differ)} test(s): {', '.join(differ[:5])}")
        passed = sum(1 for c in cases.values() if c["status"] == "passed")
        if junit is None:
            pass
        elif not junit.get("found"):
            problems.append(f"pytest's JUnit XML is missing or unreadable ({junit.get('problem')})")
        else:
            in_junit = sum(1 for c in junit["cases"].values() if c["status"] == "passed")
            if in_junit != passed:
                problems.append(f"pytest's JUnit XML has {in_junit} passed test(s), its results {passed}")
    else:
        problems.append("pytest finished in the judge's record but its results file is missing or unreadable")
    return problems

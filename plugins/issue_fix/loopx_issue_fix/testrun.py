"""Running the issue's test command in the goal's worktree, and what one run of it shows.

The command is a shell command line run with ``sh -c`` in the worktree through the core's
``run_command``: under its watcher, which kills every descendant - also one that made a session
of its own - at the time-out, when the tests end, and when LoopX itself is killed. Every run writes a
machine-readable JUnit XML report, and that report, not the exit status, says which tests
failed:

- a pytest command (``pytest ...``, ``python -m pytest ...``) gets ``--junitxml=PATH`` added,
  with ``-o junit_family=xunit1`` (test file names in the report) and ``-p no:cacheprovider``;
- any other runner names where it writes its report: ``{report}`` in the command is replaced
  by the report's path, or ``start --report PATH`` names the file (relative to the worktree)
  the runner writes.

What is kept as evidence: exit status, duration, time-out, a bounded tail of the output and
the sha256 of all of it, and every test case's id and status.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

#: Test runners whose JUnit option LoopX adds itself.
_PYTEST = re.compile(r"(^|[\s/])(py\.test|pytest)(\s|$)")
#: Exit statuses of a shell that could not find or run the command.
NOT_FOUND = (126, 127)
#: pytest's exit statuses other than "tests failed": interrupted, internal error, usage error, no tests.
PYTEST_NOT_A_RUN = (2, 3, 4, 5)
MAX_CASES = 2000


def is_pytest(command: str) -> bool:
    """Whether LoopX adds pytest's ``--junitxml`` itself."""
    return bool(_PYTEST.search(command))


def command_line(command: str, report: Path, report_option: str | None) -> str:
    """The command actually run: the user's, wired to write its JUnit report to ``report``."""
    if "{report}" in command:
        return command.replace("{report}", shlex.quote(str(report)))
    if report_option:
        return command
    if is_pytest(command):
        return (f"{command} --junitxml={shlex.quote(str(report))} -o junit_family=xunit1 -p no:cacheprovider")
    return command


def run_test(worktree: str, command: str, *, report: Path, report_option: str | None, timeout: float) -> dict:
    """Run ``command`` in ``worktree``; the run's facts and its parsed report.

    Returns ``{"command", "ran", "exit_code", "timed_out", "timeout_seconds", "duration_seconds",
    "output_tail", "output_sha256", "output_bytes", "report": {"found", "cases", "problem"}}``.
    """
    from loopx.api import run_command

    written = Path(worktree, report_option) if report_option else report
    for stale in {report, written}:
        stale.unlink(missing_ok=True)
    report.parent.mkdir(parents=True, exist_ok=True)
    ran = command_line(command, report, report_option)
    # The test command is the project's, not LoopX's: it must not act as the run.
    env = {"LOOPX_ACTOR": "", "LOOPX_RUN_ID": "", "LOOPX_GOAL_ID": "", "PYTHONDONTWRITEBYTECODE": "1"}
    # reap: whatever the tests left running (a server, a `sleep &`, a `setsid` daemon) is ended
    # when they finish, as at the time-out and when LoopX itself is killed (see run_command).
    res = run_command(["sh", "-c", ran], env=env, timeout=timeout, cwd=worktree, reap=True)
    parsed = parse_report(written)
    if report_option:
        written.unlink(missing_ok=True)  # an output, never code
    return {"command": command, "ran": ran, "timeout_seconds": timeout, **res, "report": parsed}


def _case_id(case) -> str:
    name = case.get("name") or "?"
    classname = case.get("classname") or ""
    file = case.get("file")
    if file:
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        rest = classname[len(module):].lstrip(".") if classname.startswith(module) else ""
        return "::".join([file, *([rest] if rest else []), name])
    return f"{classname}::{name}" if classname else name


def parse_report(path: Path) -> dict:
    """``{"found": bool, "cases": {id: {"status", "message", "file"}}, "problem": TEXT|None}``.

    A case's status is ``passed``, ``failed`` (an assertion failed: ``<failure>``), ``error``
    (``<error>``: a crash outside the test's assertions, or a collection error) or ``skipped``.
    """
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {"found": False, "cases": {}, "problem": "no JUnit report was written"}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        return {"found": False, "cases": {}, "problem": f"the JUnit report is not readable XML: {exc}"}
    cases = {}
    for case in root.iter("testcase"):
        status, message = "passed", None
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or (child.text or "").strip().splitlines()[-1:] or [""])
                message = (message if isinstance(message, str) else message[0])[:300]
                break
        cases[_case_id(case)] = {"status": status, "message": message, "file": case.get("file")}
        if len(cases) >= MAX_CASES:
            break
    return {"found": True, "cases": cases, "problem": None}


def not_a_test_failure(test: dict) -> str | None:
    """Why this run is not a test result at all (``None`` when it is one).

    Time-outs, a command that cannot be run, a runner that wrote no report (``No module named
    pytest``), collection errors (an import failing in a test module) and runs without tests
    are refused: none of them shows a test failing.
    """
    report = test["report"]
    if test["timed_out"]:
        return f"timed out after {test['timeout_seconds']:g}s (the whole process group was killed)"
    if test["exit_code"] in NOT_FOUND:
        return f"the command could not be run (exit {test['exit_code']}): {_last_line(test)}"
    if not report["found"]:
        return f"{report['problem']} (exit {test['exit_code']}): {_last_line(test)}"
    # pytest: "collection failure"; unittest: a module that fails to import is a _FailedTest.
    collection = [i for i, c in report["cases"].items() if c["status"] == "error"
                  and ("collection" in (c["message"] or "") or "_FailedTest" in i)]
    if collection:
        return f"collection error in {', '.join(collection[:3])}: {report['cases'][collection[0]]['message']}"
    if is_pytest(test["command"]) and test["exit_code"] in PYTEST_NOT_A_RUN:
        return f"pytest exit {test['exit_code']} (interrupted, internal or usage error, or no tests): {_last_line(test)}"
    if not report["cases"]:
        return f"the report holds no test cases (exit {test['exit_code']})"
    return None


def _last_line(test: dict) -> str:
    lines = [ln for ln in test["output_tail"].strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "(no output)"


def ids_with(test: dict, *statuses: str) -> list[str]:
    """The ids of the report's cases with one of ``statuses``, in report order."""
    return [i for i, c in test["report"]["cases"].items() if c["status"] in statuses]


def match_ids(wanted: list[str], cases: dict) -> dict[str, str | None]:
    """``{given id: the report's id for it, or None}``: exact ids, or a unique suffix match."""
    out = {}
    for w in wanted:
        if w in cases:
            out[w] = w
            continue
        found = [c for c in cases if c.endswith("::" + w) or c.replace("::", ".").endswith(w.replace("::", "."))]
        out[w] = found[0] if len(found) == 1 else None
    return out


def summary_line(test: dict) -> str:
    """One line for humans: how the run ended and the counts by status."""
    if test["timed_out"]:
        how = f"timed out after {test['timeout_seconds']:g}s"
    else:
        how = f"exit {test['exit_code']}"
    counts: dict[str, int] = {}
    for c in test["report"]["cases"].values():
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no test report"
    return f"`{test['command']}`: {how} in {test['duration_seconds']}s ({tally})"


def slim(test: dict, budget: int = 40_000) -> dict:
    """The run as evidence data, bounded: failing cases first, then passing ones while ``budget``
    bytes last (``cases_truncated`` says when some were left out)."""
    import json

    cases = test["report"]["cases"]
    order = sorted(cases, key=lambda i: cases[i]["status"] == "passed")
    keep, used = {}, 0
    for i in order:
        c = cases[i]
        entry = {"status": c["status"], **({"message": c["message"]} if c["status"] != "passed" and c["message"] else {})}
        used += len(json.dumps([i, entry]))
        if used > budget:
            break
        keep[i] = entry
    out = {k: v for k, v in test.items() if k != "report"}
    return out | {"cases": keep, "cases_total": len(cases), "cases_truncated": len(keep) < len(cases),
                  "report_found": test["report"]["found"]}

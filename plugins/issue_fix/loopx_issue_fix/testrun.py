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

import os
import re
import shlex
from pathlib import Path
from typing import Any, Callable

#: Test runners whose JUnit option LoopX adds itself.
_PYTEST = re.compile(r"(^|[\s/])(py\.test|pytest)(\s|$)")
#: Exit statuses of a shell that could not find or run the command.
NOT_FOUND = (126, 127)
#: pytest's exit statuses other than "tests failed": interrupted, internal error, usage error, no tests.
PYTEST_NOT_A_RUN = (2, 3, 4, 5)


def is_pytest(command: str) -> bool:
    """Whether LoopX adds pytest's ``--junitxml`` itself."""
    return bool(_PYTEST.search(command))


#: Shell syntax that makes a command more than one program with arguments.
_SHELL = re.compile(r"[;&|<>`$(){}\n*?]")
#: Variables the test process does not inherit from whoever ran the LoopX step: they would load
#: code (``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTEST_PLUGINS``, ``LD_PRELOAD``, coverage's
#: ``COV_CORE_*`` hooks) or change what pytest runs (``PYTEST_ADDOPTS``).
_SCRUB_PREFIXES = ("PYTHON", "PYTEST_", "COV_CORE_", "LOOPX_", "VIRTUAL_ENV", "CONDA_")
_SCRUB = ("LD_PRELOAD", "LD_AUDIT", "__PYVENV_LAUNCHER__")


def plan(command: str, repo: str | None = None) -> dict[str, Any] | None:
    """How LoopX runs a plain pytest command itself, or ``None`` (then it runs under ``sh -c``).

    A plain command is ``[VAR=value ...] PYTHON -m pytest ARGS`` or ``[VAR=value ...] pytest ARGS``
    without shell syntax. Returns ``{"interpreter", "args", "module", "env"}``: the interpreter as
    an absolute path (a relative one is taken relative to ``repo``, a bare name from ``PATH``
    now, a ``pytest`` script's from its ``#!`` line), so that who runs a later step cannot
    change which interpreter runs the tests.
    """
    import os
    import shutil

    if _SHELL.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    env = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if not words:
        return None
    first, name = words[0], os.path.basename(words[0])

    def resolve(exe: str) -> str | None:
        if os.sep in exe:
            return os.path.abspath(os.path.join(repo or ".", exe)) if not os.path.isabs(exe) else exe
        return shutil.which(exe)

    if name.startswith("python") and words[1:3] == ["-m", "pytest"]:
        interpreter, args, module = resolve(first), words[3:], True
    elif name in ("pytest", "py.test"):
        script = resolve(first)
        interpreter, args, module = _shebang(script) if script else None, words[1:], False
    else:
        return None
    if not interpreter or not os.path.isfile(interpreter):
        return None
    return {"interpreter": interpreter, "args": args, "module": module, "env": env}


def _shebang(script: str) -> str | None:
    try:
        with open(script, "rb") as fh:
            line = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not line.startswith("#!"):
        return None
    parts = line[2:].split()
    return parts[0] if parts and "python" in parts[0].rsplit("/", 1)[-1] else None


def clean_env(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The changes to LoopX's environment the test process gets (``None`` removes a variable)."""
    import os

    env: dict[str, Any] = {k: None for k in os.environ if k.startswith(_SCRUB_PREFIXES) or k in _SCRUB}
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"})
    env.update(extra or {})
    return env


def command_line(command: str, report: Path, report_option: str | None) -> str:
    """The command run under ``sh -c``: the user's, wired to write its JUnit report to ``report``."""
    if "{report}" in command:
        return command.replace("{report}", shlex.quote(str(report)))
    if report_option:
        return command
    if is_pytest(command):
        return (f"{command} --junitxml={shlex.quote(str(report))} -o junit_family=xunit1 -p no:cacheprovider")
    return command


_BOOT = "import sys; sys.path.insert(0, {dir!r}); import _loopx_issue_fix_probe as p; sys.exit(p.main())"


def run_test(checkout: str, command: str, *, report: Path, report_option: str | None, timeout: float,
             planned: dict[str, Any] | None = None, pycache: Path | None = None, write_bytecode: bool = False,
             private: Path | None = None, registry_url: str | None = None, deselect: list[str] | tuple[str, ...] = (),
             junit: bool = True) -> dict[str, Any]:
    """Run ``command`` in ``checkout`` (a clean copy of the code); the run's facts and its results.

    With ``planned`` (see :func:`plan`) LoopX starts the interpreter itself, isolated (``-I -B``),
    with its probe (:mod:`loopx_issue_fix.probe`) collecting every test id, the collection
    errors, the exit status and the files the run opened; with ``pycache`` it uses that bytecode
    directory, writing into it only with ``write_bytecode`` (see :mod:`loopx_issue_fix.bytecode`). Otherwise ``sh -c`` runs the command
    and its JUnit report is read. Either way the environment is :func:`clean_env`, and the command
    runs under :func:`loopx.api.process.run_confined`: it may write only beneath ``private`` (the run's
    own directory, which holds ``checkout``; its ``tmp/`` is the run's ``TMPDIR``), default: the
    checkout's parent. ``confined`` in the result says whether it ran under that policy.
    ``deselect``: test ids a user accepted as failing, left out of a pytest run (``--deselect``).

    A run LoopX starts itself also has its judge (:mod:`loopx_issue_fix.judge`): its lines come
    through a pipe LoopX opens now and passes as a descriptor, pytest writes its JUnit XML into the
    run's directory, and :func:`loopx_issue_fix.verdict.tampering` compares the four records
    (``report["tampered"]``: the disagreements, ``[]`` when none). ``junit=False`` leaves the JUnit
    XML out (the base run: it costs ~5 % of a run, and a base run cannot make a fix green).

    Returns ``{"command", "ran", "isolation", "exit_code", "timed_out", "timeout_seconds",
    "duration_seconds", "output_tail", "output_sha256", "output_bytes", "report": {"found", "cases",
    "problem", "collection_errors", "exit_status", "opened"}}``.
    """
    import shutil

    from loopx import api

    from loopx_issue_fix import probe, verdict

    written = Path(checkout, report_option) if report_option else report
    for stale in {report, written}:
        stale.unlink(missing_ok=True)
    report.parent.mkdir(parents=True, exist_ok=True)
    unselect = [w for i in deselect for w in ("--deselect", i)]
    pipe = None
    if planned:
        probe_dir = report.parent / "probe"
        probe_dir.mkdir(exist_ok=True)
        shutil.copyfile(probe.__file__, probe_dir / "_loopx_issue_fix_probe.py")
        # Copied, not imported: it imports pytest, which LoopX's own process does not need.
        shutil.copyfile(Path(probe.__file__).with_name("judge.py"), probe_dir / "_loopx_issue_fix_judge.py")
        results = report.with_suffix(".json")
        results.unlink(missing_ok=True)
        junit_xml = report.with_name("judge.xml")
        # --rootdir: ids relative to the copy, not to a configuration above it (naming this run's dir)
        args = [*planned["args"], *unselect, "-p", "no:cacheprovider", f"--rootdir={checkout}",
                f"--confcutdir={checkout}", *([f"--junitxml={junit_xml}", "-o", "junit_family=xunit1"] if junit else [])]
        pipe = os.pipe()
        argv = [planned["interpreter"], "-I", "-B", "-c", _BOOT.format(dir=str(probe_dir)), checkout, str(results),
                "1" if planned["module"] else "0", str(pycache) if pycache else "-", "1" if write_bytecode else "0",
                str(pipe[1]), *args]
        ran = shlex.join([planned["interpreter"], "-I", "-B", "-m", "pytest", *args])
        env = clean_env(planned["env"])
    else:
        ran = command_line(command, report, report_option)
        if unselect and is_pytest(command):
            ran = f"{ran} {shlex.join(unselect)}"
        argv, env = ["sh", "-c", ran], clean_env()
    private = Path(private or Path(checkout).parent)
    tmp = private / "tmp"
    tmp.mkdir(exist_ok=True)
    env.update({"TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp)})
    # reap: whatever the tests left running (a server, a `sleep &`, a `setsid` daemon) is ended
    # when they finish, as at the time-out and when LoopX itself is killed (see run_command).
    if pipe is None:
        res = api.process.run_confined(argv, writable=[str(private)], env=env, timeout=timeout, cwd=checkout, reap=True,
                           registry_url=registry_url)
        parsed = parse_report(written)
    else:
        res, lines = _with_judge(pipe, lambda: api.process.run_confined(argv, writable=[str(private)], env=env, timeout=timeout,
                                                            cwd=checkout, reap=True, registry_url=registry_url,
                                                            pass_fds=(pipe[1],)))
        parsed = parse_results(results)
        parsed["tampered"] = verdict.tampering(lines, parsed, parse_report(junit_xml) if junit else None,
                                               res["exit_code"], res["timed_out"])
    return {"command": command, "ran": ran, "isolation": "probe" if planned else "shell", "timeout_seconds": timeout,
            **res, "report": parsed}


def _with_judge(pipe: tuple[int, int], run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bytes]:
    """``run()`` while a thread reads the judge's pipe; ``(its result, every byte the pipe held)``.

    LoopX keeps its own write end open while the run lasts (the child inherits a copy), and closes
    it once the run - and, with ``reap``, everything it started - is over: then the read ends."""
    import threading

    from loopx_issue_fix.verdict import MAX_BYTES

    read_end, write_end = pipe
    got = bytearray()

    def pump() -> None:
        while chunk := os.read(read_end, 1 << 16):
            if len(got) <= MAX_BYTES:
                got.extend(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        res = run()
    finally:
        os.close(write_end)
        reader.join(timeout=10)
        os.close(read_end)
    return res, bytes(got)


def parse_results(path: Path) -> dict[str, Any]:
    """The probe's JSON results as a report (see :func:`parse_report`), with the collection errors,
    pytest's exit status and the files the run opened."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problem = "no test results were written" if isinstance(exc, FileNotFoundError) else f"unreadable results: {exc}"
        return {"found": False, "cases": {}, "problem": problem, "collection_errors": {}, "exit_status": None,
                "opened": []}
    return {"found": True, "cases": data["cases"], "problem": None, "collection_errors": data["collection_errors"],
            "exit_status": data["exit_status"], "opened": data["opened"], "outside": data.get("outside", []),
            "outside_truncated": bool(data.get("outside_truncated"))}


def _case_id(case: Any) -> str:
    name = case.get("name") or "?"
    classname = case.get("classname") or ""
    file = case.get("file")
    if file:
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        rest = classname[len(module):].lstrip(".") if classname.startswith(module) else ""
        return "::".join([file, *([rest] if rest else []), name])
    return f"{classname}::{name}" if classname else name


def parse_report(path: Path) -> dict[str, Any]:
    """``{"found": bool, "cases": {id: {"status", "message", "file"}}, "problem": TEXT|None}``.

    A case's status is ``passed``, ``failed`` (an assertion failed: ``<failure>``), ``error``
    (``<error>``: a crash outside the test's assertions, or a collection error) or ``skipped``.
    """
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {"found": False, "cases": {}, "problem": "no JUnit report was written", "collection_errors": {},
                "exit_status": None, "opened": []}
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        return {"found": False, "cases": {}, "problem": f"the JUnit report is not readable XML: {exc}",
                "collection_errors": {}, "exit_status": None, "opened": []}
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
    return {"found": True, "cases": cases, "problem": None, "collection_errors": {}, "exit_status": None,
            "opened": []}


def not_a_test_failure(test: dict[str, Any]) -> str | None:
    """Why this run is not a test result at all (``None`` when it is one).

    Time-outs, a command that cannot be run, a runner that wrote no report (``No module named
    pytest``), collection errors (an import failing in a test module) and runs without tests
    are refused: none of them shows a test failing.
    """
    report = test["report"]
    if report.get("tampered"):
        return f"the test run's records disagree (the runner was tampered with): {'; '.join(report['tampered'][:3])}"
    if test["timed_out"]:
        return f"timed out after {test['timeout_seconds']:g}s (the whole process group was killed)"
    if test["exit_code"] in NOT_FOUND:
        return f"the command could not be run (exit {test['exit_code']}): {_last_line(test)}"
    if not report["found"]:
        return f"{report['problem']} (exit {test['exit_code']}): {_last_line(test)}"
    # pytest: "collection failure"; unittest: a module that fails to import is a _FailedTest.
    collection = [i for i, c in report["cases"].items() if c["status"] == "error"
                  and ("collection" in (c["message"] or "") or "_FailedTest" in i)]
    if report.get("collection_errors"):
        first = next(iter(report["collection_errors"]))
        return (f"{len(report['collection_errors'])} collection error(s), in {first}: "
                f"{report['collection_errors'][first]}")
    if collection:
        return f"collection error in {', '.join(collection[:3])}: {report['cases'][collection[0]]['message']}"
    if is_pytest(test["command"]) and test["exit_code"] in PYTEST_NOT_A_RUN:
        return f"pytest exit {test['exit_code']} (interrupted, internal or usage error, or no tests): {_last_line(test)}"
    if not report["cases"]:
        return f"the report holds no test cases (exit {test['exit_code']})"
    return None


def _last_line(test: dict[str, Any]) -> str:
    lines = [ln for ln in test["output_tail"].strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "(no output)"


def ids_with(test: dict[str, Any], *statuses: str) -> list[str]:
    """The ids of the report's cases with one of ``statuses``, in report order."""
    return [i for i, c in test["report"]["cases"].items() if c["status"] in statuses]


def match_ids(wanted: list[str], cases: dict[str, Any]) -> dict[str, str | None]:
    """``{given id: the report's id for it, or None}``: exact ids, or a unique suffix match."""
    out: dict[str, str | None] = {}
    for w in wanted:
        if w in cases:
            out[w] = w
            continue
        found = [c for c in cases if c.endswith("::" + w) or c.replace("::", ".").endswith(w.replace("::", "."))]
        out[w] = found[0] if len(found) == 1 else None
    return out


def summary_line(test: dict[str, Any]) -> str:
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


#: Text JSON writes as itself between two quotes: printable ASCII but for ``"`` and ``\\``.
_JSON_PLAIN = re.compile(r'[\x20\x21\x23-\x5b\x5d-\x7e]*').fullmatch


def _json_len(text: str) -> int:
    """``len(json.dumps(text))``, without encoding the common plain string."""
    import json

    return len(text) + 2 if _JSON_PLAIN(text) else len(json.dumps(text))


def _entry_size(test_id: str, entry: dict[str, Any]) -> int:
    """``len(json.dumps([test_id, entry]))`` for a :func:`slim` entry (``status``, maybe ``message``):
    counted, not encoded - a 1,500-test run has 1,500 of them, twice a step."""
    size = 16 + _json_len(test_id) + _json_len(entry["status"])  # ["", {"status": ""}]
    if "message" in entry:
        size += 13 + _json_len(entry["message"])  # , "message": ""
    return size


def slim(test: dict[str, Any], budget: int = 40_000) -> dict[str, Any]:
    """The run as evidence data, bounded: failing cases first, then passing ones while ``budget``
    bytes last (``cases_truncated`` says when some were left out)."""
    cases = test["report"]["cases"]
    order = sorted(cases, key=lambda i: cases[i]["status"] == "passed")
    keep, used = {}, 0
    for i in order:
        c = cases[i]
        entry = {"status": c["status"], **({"message": c["message"]} if c["status"] != "passed" and c["message"] else {})}
        used += _entry_size(i, entry)
        if used > budget:
            break
        keep[i] = entry
    out = {k: v for k, v in test.items() if k != "report"}
    return out | {"cases": keep, "cases_total": len(cases), "cases_truncated": len(keep) < len(cases),
                  "report_found": test["report"]["found"]}

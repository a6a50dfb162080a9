"""The reviewer packet: one Markdown page a reviewer can act on.

It holds loud warnings first (head equals base, only tests changed, flaky tests, test changes
allowed), the issue and root cause, the failing test ids red -> green with the evidence ids and
output tails of both runs, the environment the tests ran in, every attempt in order (failed
ones included), and the full diff from the base commit to the verified commit.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from loopx_issue_fix.state import JSON, IssueFixState, Reproduction, Verification
    from loopx.api import ReadTx

_TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def _evidence(tx: ReadTx, evidence_id: str | None) -> JSON | None:
    from loopx import api

    ev = api.evidence.load(tx, evidence_id) if evidence_id else None
    if ev is None:
        return None
    out = {"id": ev.id, "run_id": ev.run_id, "summary": ev.summary, "created_at": ev.created_at,
           "data": ev.data if ev.data is not None else {}, "file_path": ev.file_path,
           "file_sha256": ev.file_sha256}
    out["cases"] = _cases(out)
    return out


def _root_cause(tx: ReadTx, goal_id: str, given: str | None) -> str:
    """The note given, else the latest ``root_cause`` (or ``note``) evidence an agent recorded."""
    if given:
        return given
    from loopx import api

    # The capability's own notes (a refused publish) are not the agent's account of the cause.
    notes = [ev for ev in api.evidence.list(tx, goal_id) if ev.kind in ("root_cause", "note")
             and ev.actor != "capability:issue_fix"]
    if notes:
        return str(notes[-1].summary)
    return ("(not recorded: pass --root-cause TEXT, or record it with "
            "`loopx evidence add --run-id R --kind root_cause --summary TEXT`)")


def is_test_path(path: str, known: list[str]) -> bool:
    """Whether ``path`` is a test file: one that held a failing test, or named like one."""
    return path in known or bool(_TEST_PATH.search(path))


def warnings(state: IssueFixState, diff: JSON) -> list[str]:
    """The packet's loud warnings, in words."""
    out = []
    ver, repro = state.verification, state.reproduction
    assert ver is not None and repro is not None  # a hand-off follows a green verify
    paths = [f["path"] for f in diff["files"]]
    if not paths or ver.tree == state.branch.base_tree:
        out.append("the verified commit has the same code as the base commit (head equals base): nothing was fixed")
    elif all(is_test_path(p, repro.files) for p in paths):
        out.append("only test files changed: the code under test is the same as at the base commit")
    if state.flaky:
        out.append(f"flaky: {', '.join(state.flaky[:5])} passed on the very code that failed")
    touched = [p for p in paths if p in repro.files]
    if touched and state.allow_test_changes:
        out.append(f"the files holding the failing tests were changed (allowed at start): {', '.join(touched)}")
    if state.approved_test_changes:
        out.append(f"test infrastructure changed, approved by a user at a gate: "
                   f"{', '.join(state.approved_test_changes[:10])}")
    for change in state.git_changes:
        moved = change.remote + change.local
        out.append(f"refs changed outside LoopX before its {change.step} step (a push or ref change it did not "
                   f"make): {', '.join(moved[:5])}")
    if ver.accepted_failing:
        out.append(f"{len(ver.accepted_failing)} test(s) still failing, accepted by a user and left out of the "
                   f"verification run: {', '.join(ver.accepted_failing[:5])}")
    tampered = [a for a in state.log if a.outcome == "runner_tampered"]
    if tampered:
        out.append(f"{len(tampered)} verify attempt(s) found the test run's records disagreeing (the runner tampered "
                   f"with: issue_fix.runner_tampered), evidence {', '.join(str(a.evidence_id) for a in tampered[:5])}: "
                   f"{(tampered[-1].detail or '')[:200]}")
    literals = special_cases(state, diff)
    if literals:
        out.append(f"the fix compares against literal values that appear in the failing test: {', '.join(literals)} "
                   "(special-casing the test's input?)")
    hooks = machinery(diff)
    if hooks:
        out.append(f"the fix's source reaches into the test machinery: {', '.join(hooks)}")
    return out


_LITERAL = re.compile(r"""(?<![\w.])(-?\d+(?:\.\d+)?|'[^'\n]{1,40}'|"[^"\n]{1,40}")""")
_TRIVIAL = {"0", "1", "-1", "2", "''", '""'}
_MACHINERY = re.compile(r"\b(pytest|_pytest|conftest|sys\.modules|sys\.addaudithook|builtins|atexit|os\._exit|"
                        r"sys\.settrace|sys\.setprofile|_loopx_issue_fix_probe|unittest\.mock)\b")


def split_paths(paths: list[str], known: list[str]) -> dict[str, list[str]]:
    """The diff's files as ``{"source", "tests", "other"}``: Python code, test files, the rest."""
    from loopx_issue_fix import guard

    out: dict[str, list[str]] = {"source": [], "tests": [], "other": []}
    for p in paths:
        key = "tests" if is_test_path(p, known) or guard.is_test_path(p) else "source" if guard.is_code(p) else "other"
        out[key].append(p)
    return out


def _added_lines(patch: str, wanted: Callable[[str], bool]) -> list[str]:
    lines: list[str] = []
    current: str | None = None
    for line in patch.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("+") and current and wanted(current):
            lines.append(line[1:])
    return lines


def special_cases(state: IssueFixState, diff: JSON) -> list[str]:
    """Literal values on the fix's added source lines in a comparison that also appear in the failing
    tests' files at the reproduction (``if (a, b) == (2, 3): return 5``)."""
    from loopx_issue_fix import gitrepo, guard

    repro = state.reproduction
    if repro is None:
        return []
    test_text = ""
    for path in repro.files:
        data = gitrepo.blob(state.repo, repro.tree, path)
        test_text += (data or b"").decode("utf-8", "replace")
    if not test_text:
        return []
    in_test = set(_LITERAL.findall(test_text)) - _TRIVIAL
    found: list[str] = []
    for line in _added_lines(diff.get("patch", ""), lambda p: guard.is_code(p) and not guard.is_test_path(p)):
        if not re.search(r"==|!=|\bin\b|\bis\b|\bif\b|\belif\b|\breturn\b|<=|>=|[<>]", line):
            continue
        for value in _LITERAL.findall(line.split("#", 1)[0]):
            if value in in_test and value not in found:
                found.append(value)
    return found[:10]


def machinery(diff: JSON) -> list[str]:
    """Names on the fix's added source lines that reach the test machinery (pytest, sys.modules, ...)."""
    from loopx_issue_fix import guard

    found = []
    for line in _added_lines(diff.get("patch", ""), lambda p: guard.is_code(p) and not guard.is_test_path(p)):
        for m in _MACHINERY.findall(line):
            if m not in found:
                found.append(m)
    return found


def repo_passed(repro: Reproduction) -> int:
    """How many tests passed at the reproduction."""
    return repro.passed


def _cases(ev: JSON | None) -> JSON:
    """Every test's result from the evidence's complete results file, read only while its sha256
    is the recorded one (``artifact_tampered``: the packet never shows results changed since)."""
    import json

    from loopx import api

    if ev is None:
        return {}
    if not ev.get("file_path") or not ev.get("file_sha256"):
        return ev["data"].get("cases") or {}
    data = api.files.read_artifact(ev["file_path"], ev["file_sha256"], what=f"the results file of evidence {ev['id']}")
    try:
        cases: JSON = json.loads(data)["cases"]
        return cases
    except (ValueError, KeyError):
        return ev["data"].get("cases") or {}


def _flipped(before: JSON | None, after: JSON | None) -> list[str]:
    """Every test id whose status differs between the two runs (from their complete results)."""
    a, b = (before or {}).get("cases", {}), (after or {}).get("cases", {})
    rows = [(i, (a.get(i) or {}).get("status", "absent"), (b.get(i) or {}).get("status", "absent"))
            for i in sorted(set(a) | set(b))]
    rows = [r for r in rows if r[1] != r[2]]
    out = ["## Tests that flipped", "", f"{len(rows)} test id(s) changed status from the reproduction to the "
           "verification:", "", "| test | before | after |", "|---|---|---|"]
    out += [f"| `{i}` | {x} | {y} |" for i, x, y in rows[:500]]
    if len(rows) > 500:
        out.append(f"| ... {len(rows) - 500} more in the results files | | |")
    return out + [""]


def _split(diff: JSON, repro: Reproduction) -> list[str]:
    parts = split_paths([f["path"] for f in diff["files"]], repro.files)
    out: list[str] = []
    for key, title in (("source", "Source"), ("tests", "Tests"), ("other", "Other")):
        out += [f"### {title}", "", *([f"- `{p}`" for p in parts[key]] or ["- (none)"]), ""]
    return out


def _status(ev: JSON | None, test_id: str) -> str:
    if ev is None:
        return "(no evidence)"
    case = ev["cases"].get(test_id)
    return case["status"] if case else "(not in report)"


def _tail(ev: JSON | None, title: str) -> list[str]:
    if ev is None:
        return [f"### {title}", "", "(no evidence recorded)", ""]
    d = ev["data"]
    how = "timed out" if d.get("timed_out") else f"exit {d.get('exit_code')}"
    tail = (d.get("output_tail") or "").rstrip()
    return [f"### {title}", "",
            f"- evidence `{ev['id']}` (run `{ev['run_id']}`, {ev['created_at']}); code tree `{d.get('tree')}`",
            f"- `{d.get('ran')}`: **{how}** in {d.get('duration_seconds')}s (time limit {d.get('timeout_seconds')}s: "
            f"{d.get('timeout_source')})",
            f"- output sha256 `{d.get('output_sha256')}` ({d.get('output_bytes')} bytes); the last lines:", "",
            "```", tail[-3000:] if tail else "(no output)", "```", ""]


def probe(state: IssueFixState, timeout: float = 20) -> JSON:
    """What the test command runs on, asked outside the worktree: ``{"interpreter", "python", "runner"}``.

    The command's first word, when it is a Python interpreter or ``pytest``, is asked for its
    version (through the core's ``run_command``, with a time limit); anything else is ``None``.
    """
    import os
    import shlex
    import shutil

    from loopx import api

    from loopx_issue_fix import testrun

    out: JSON = {"interpreter": None, "python": None, "runner": None}
    planned = state.runner
    if planned:
        # The interpreter verify ran, asked in isolated mode outside the worktree: nothing the
        # agent left there (a `pytest.py`, a `sitecustomize.py`) runs in LoopX's step.
        def ask_isolated(*argv: str) -> str | None:
            res = api.process.run([planned["interpreter"], "-I", "-B", *argv], env={}, timeout=timeout,
                              cwd=state.goal_dir)
            lines = res["output_tail"].strip().splitlines()
            return lines[-1][:200] if res["exit_code"] == 0 and lines else None

        return {"interpreter": planned["interpreter"],
                "python": ask_isolated("-c", "import sys; print(sys.version.split()[0])"),
                "runner": ask_isolated("-m", "pytest", "--version")}
    try:
        first = shlex.split(state.test_command)[0]
    except (ValueError, IndexError):
        return out
    exe = first if os.path.sep in first else shutil.which(first)
    if not exe:
        return out

    def ask(*argv: str) -> str | None:
        res = api.process.run([*argv], env={}, timeout=timeout, cwd=state.goal_dir)
        lines = res["output_tail"].strip().splitlines()
        return lines[-1][:200] if res["exit_code"] == 0 and lines else None

    name = os.path.basename(exe)
    if name.startswith("python"):
        out["interpreter"] = exe
        out["python"] = ask(exe, "-c", "import sys; print(sys.version.split()[0])")
        if testrun.is_pytest(state.test_command):
            out["runner"] = ask(exe, "-m", "pytest", "--version")
    elif name in ("pytest", "py.test"):
        out["interpreter"] = exe
        out["runner"] = ask(exe, "--version")
    return out


def _environment(state: IssueFixState, probed: JSON) -> list[str]:
    import platform
    import sys

    from loopx_issue_fix import __version__, gitrepo

    try:
        from importlib.metadata import version

        loopx_version = version("loopx-control")  # the core's distribution (docs/plugins.md)
    except Exception:  # noqa: BLE001 - a packet without the version is still a packet
        loopx_version = "unknown"
    lines = ["## Environment", "",
             f"- test command: `{state.test_command}`" + (f" (report written to `{state.report}`)"
                                                          if state.report else ""),
             f"- test interpreter: `{probed.get('interpreter') or '(not a Python command)'}`"
             + (f" (Python {probed['python']})" if probed.get("python") else ""),
             f"- test runner: {probed.get('runner') or '(unknown)'}",
             f"- tests run in the worktree `{state.worktree}` (branch `{state.branch.name}`)",
             f"- LoopX {loopx_version} and loopx-issue-fix {__version__} on `{sys.executable}` "
             f"(Python {platform.python_version()}, {platform.platform()}); {gitrepo.git('/', 'version')}"]
    if state.user_checkout.dirty:
        lines.append(f"- the user's checkout `{state.repo}` had uncommitted changes; they were not used and not "
                     f"touched ({', '.join(state.user_checkout.dirty_paths[:5])})")
    return lines + [""]


def _still_failing(tx: ReadTx, goal_id: str, state: IssueFixState) -> list[str]:
    """First in the packet: every test that still fails with the verified code (a user accepted it
    at a gate; verify left it out of its run), with who accepted it."""
    from loopx import api

    accepted = state.verification.accepted_failing if state.verification else []
    if not accepted:
        return []
    gate = state.accept_failing_gate
    who = "a user"
    try:
        decided = api.gates.load(tx, goal_id, gate.gate_id) if gate else None
        if decided is not None and decided.decided_by:
            who = f"{decided.decided_by} at gate `{decided.id}` ({decided.decided_at})"
    except Exception:  # noqa: BLE001 - the list matters more than who
        pass
    lines = ["## Still failing", "", f"{len(accepted)} test(s) failed at the reproduction and were **not** fixed; "
             f"accepted as failing by {who}, and left out of the verification run:", ""]
    lines += [f"- **still failing**: `{t}`" for t in accepted]
    return lines + [""]


#: Attempt outcomes where a guard stopped the step before anything was committed or sent.
BLOCKED = ("tests_changed", "tests_weakened", "environment_changed", "git_changed", "runner_tampered",
           "not_a_test_failure", "changed_since_verify")


def _refused_and_blocked(tx: ReadTx, goal_id: str, state: IssueFixState) -> list[str]:
    """Every command the broker refused in this goal's turns (``refused`` evidence: an agent tried
    what only the user may do, e.g. ``gate approve``), and every attempt a guard blocked."""
    from loopx import api

    refused = [ev for ev in api.evidence.list(tx, goal_id) if ev.kind == "refused"]
    blocked = [a for a in state.log if a.outcome in BLOCKED]
    lines = ["## Refused and blocked attempts", "",
             f"{len(refused)} command(s) refused inside a turn, {len(blocked)} attempt(s) blocked by a guard.", ""]
    for ev in refused:
        why = ((ev.data or {}).get("why") or "") if isinstance(ev.data, dict) else ""
        lines.append(f"- **refused** ({ev.created_at}, run `{ev.run_id}`, evidence `{ev.id}`): "
                     f"`{ev.summary.removeprefix('refused: ')[:200]}`" + (f": {why[:200]}" if why else ""))
    for a in blocked:
        lines.append(f"- **blocked** {a.step} `{a.outcome}` (evidence `{a.evidence_id}`): "
                     f"{(a.detail or '').replace(chr(10), ' ')[:200]}")
    return lines + [""]


def _ignored(tx: ReadTx, goal_id: str, ver: Verification) -> list[str]:
    """The files verify left out, over every verify attempt (a file hidden in an earlier attempt
    and removed before the green one is still named), the green run's first."""
    from loopx import api

    found = list(ver.ignored)
    for ev in api.evidence.list(tx, goal_id):
        data = ev.data if isinstance(ev.data, dict) else {}
        if ev.actor == "capability:issue_fix" and data.get("step") == "verify":
            found += [p for p in data.get("ignored") or [] if p not in found]
    return found


def render(tx: ReadTx, goal_id: str, state: IssueFixState, diff: JSON, root_cause: str | None,
           probed: JSON) -> tuple[str, list[str]]:
    """The packet's Markdown text and its warnings."""
    issue, branch, ver, repro = state.issue, state.branch, state.verification, state.reproduction
    assert ver is not None and repro is not None  # a hand-off follows a green verify
    before, after = _evidence(tx, repro.evidence_id), _evidence(tx, ver.evidence_id)
    warns = warnings(state, diff)
    lines = [f"# Hand-off: {issue.title}", "", *_still_failing(tx, goal_id, state)]
    for w in warns:
        lines += [f"> **WARNING: {w}**", ">"]
    if warns:
        lines.append("")
    lines += [
        f"- goal `{goal_id}`; repository `{state.repo}`",
        f"- verified commit `{ver.commit}` (tree `{ver.tree}`, made by LoopX) on base `{branch.base_commit}`",
        f"- publishing: {state.publish.provider} `{branch.name}` to `{branch.remote}`, after a user "
        "approves the production gate",
        "",
        "## Issue", "", issue.text, "",
        "## Root cause", "", _root_cause(tx, goal_id, root_cause), "",
        "## Failing tests: red -> green", "",
        f"| test | before (`{repro.evidence_id}`) | after (`{ver.evidence_id}`) |",
        "|---|---|---|",
    ]
    for test_id in repro.failing:
        lines.append(f"| `{test_id}` | {_status(before, test_id)} | {_status(after, test_id)} |")
    p2p = ver.pass_to_pass

    def total(n: int | None) -> int | str:
        return "?" if n is None else n

    lines += ["", f"FAIL_TO_PASS: {len(repro.failing)} test(s), every one passes now. PASS_TO_PASS: "
              f"{p2p.get('still_passing', repo_passed(repro))} of {p2p.get('total', repo_passed(repro))} test(s) that passed "
              "at the reproduction still exist and pass."
              + (f" Still failing: {len(ver.accepted_failing)} test(s) that failed at the reproduction (accepted, "
                 "not run; listed first)." if ver.accepted_failing else ""),
              f"Complete results (every test id): reproduction sha256 `{repro.results_sha256}` "
              f"({total(repro.cases_total)} tests, exit status {repro.exit_status}), verification sha256 "
              f"`{ver.results_sha256}` ({total(ver.cases_total)} tests); the files are named by the "
              "evidence.", ""]
    lines += _flipped(before, after)
    lines += _tail(before, "Before the fix (reproduction)")
    lines += _tail(after, "After the fix (verification)")
    lines += _environment(state, probed)
    lines += ["## Attempts, in order", "", "| # | step | outcome | evidence | detail |", "|---|---|---|---|---|"]
    for n, a in enumerate(state.log, 1):
        detail = (a.detail or "").replace("|", "\\|").replace("\n", " ")
        # A user's decision (a rejected publish gate) is named by its gate, a step by its evidence.
        ref = a.evidence_id or a.gate_id or ""
        lines.append(f"| {n} | {a.step} | {a.outcome} | `{ref}` | {detail} |")
    failed = [a for a in state.log if a.outcome not in ("red", "green", "published")]
    lines += ["", f"{len(failed)} failed attempt(s).", "", *_refused_and_blocked(tx, goal_id, state),
              "## Files verify did not use", "",
              "Ignored or excluded files in the worktree, in any verify attempt (never copied into the clean "
              "checkout the tests ran on):",
              "", *([f"- `{p}`" for p in _ignored(tx, goal_id, ver)] or ["- (none)"]), "",
              *([f"Test changes a user approved: {', '.join(state.approved_test_changes)}", ""]
                if state.approved_test_changes else []),
              "## Diff", "",
              *_split(diff, repro),
              f"{diff['files_changed']} file(s) changed, {diff['insertions']} insertion(s), "
              f"{diff['deletions']} deletion(s) from `{branch.base_commit[:12]}` to `{ver.commit[:12]}`", "",
              "```", diff["stat"] or "(no changes)", "```", "",
              "```diff", diff["patch"] or "(empty)", "```", ""]
    return "\n".join(lines).rstrip() + "\n", warns

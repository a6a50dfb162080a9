"""The reviewer packet: one Markdown page a reviewer can act on.

It holds loud warnings first (head equals base, only tests changed, flaky tests, test changes
allowed), the issue and root cause, the failing test ids red -> green with the evidence ids and
output tails of both runs, the environment the tests ran in, every attempt in order (failed
ones included), and the full diff from the base commit to the verified commit.
"""

from __future__ import annotations

import re

_TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


def _evidence(tx, evidence_id: str | None) -> dict | None:
    from loopx.api import load_evidence

    ev = load_evidence(tx, evidence_id) if evidence_id else None
    if ev is None:
        return None
    return {"id": ev.id, "run_id": ev.run_id, "summary": ev.summary, "created_at": ev.created_at,
            "data": ev.data if ev.data is not None else {}}


def _root_cause(tx, goal_id: str, given: str | None) -> str:
    """The note given, else the latest ``root_cause`` (or ``note``) evidence an agent recorded."""
    if given:
        return given
    from loopx.api import list_evidence

    # The capability's own notes (a refused publish) are not the agent's account of the cause.
    notes = [ev for ev in list_evidence(tx, goal_id) if ev.kind in ("root_cause", "note")
             and ev.actor != "capability:issue_fix"]
    if notes:
        return notes[-1].summary
    return ("(not recorded: pass --root-cause TEXT, or record it with "
            "`loopx evidence add --run-id R --kind root_cause --summary TEXT`)")


def is_test_path(path: str, known: list[str]) -> bool:
    """Whether ``path`` is a test file: one that held a failing test, or named like one."""
    return path in known or bool(_TEST_PATH.search(path))


def warnings(state: dict, diff: dict) -> list[str]:
    """The packet's loud warnings, in words."""
    out = []
    ver, repro = state["verification"], state["reproduction"]
    paths = [f["path"] for f in diff["files"]]
    if not paths or ver["tree"] == state["branch"]["base_tree"]:
        out.append("the verified commit has the same code as the base commit (head equals base): nothing was fixed")
    elif all(is_test_path(p, repro.get("files", [])) for p in paths):
        out.append("only test files changed: the code under test is the same as at the base commit")
    if state.get("flaky"):
        out.append(f"flaky: {', '.join(state['flaky'][:5])} passed on the very code that failed")
    touched = [p for p in paths if p in repro.get("files", [])]
    if touched and state.get("allow_test_changes"):
        out.append(f"the files holding the failing tests were changed (allowed at start): {', '.join(touched)}")
    return out


def _status(ev: dict | None, test_id: str) -> str:
    if ev is None:
        return "(no evidence)"
    case = (ev["data"].get("cases") or {}).get(test_id)
    return case["status"] if case else "(not in report)"


def _tail(ev: dict | None, title: str) -> list[str]:
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


def probe(state: dict, timeout: float = 20) -> dict:
    """What the test command runs on, asked in the worktree: ``{"interpreter", "python", "runner"}``.

    The command's first word, when it is a Python interpreter or ``pytest``, is asked for its
    version (through the core's ``run_command``, with a time limit); anything else is ``None``.
    """
    import os
    import shlex
    import shutil

    from loopx.api import run_command

    from loopx_issue_fix import testrun

    out = {"interpreter": None, "python": None, "runner": None}
    try:
        first = shlex.split(state["test_command"])[0]
    except (ValueError, IndexError):
        return out
    exe = first if os.path.sep in first else shutil.which(first)
    if not exe:
        return out

    def ask(*argv):
        res = run_command([*argv], env={}, timeout=timeout, cwd=state["worktree"])
        lines = res["output_tail"].strip().splitlines()
        return lines[-1][:200] if res["exit_code"] == 0 and lines else None

    name = os.path.basename(exe)
    if name.startswith("python"):
        out["interpreter"] = exe
        out["python"] = ask(exe, "-c", "import sys; print(sys.version.split()[0])")
        if testrun.is_pytest(state["test_command"]):
            out["runner"] = ask(exe, "-m", "pytest", "--version")
    elif name in ("pytest", "py.test"):
        out["interpreter"] = exe
        out["runner"] = ask(exe, "--version")
    return out


def _environment(state: dict, probed: dict) -> list[str]:
    import platform
    import sys

    from loopx_issue_fix import __version__, gitrepo

    try:
        from importlib.metadata import version

        loopx_version = version("loopx")
    except Exception:  # noqa: BLE001 - a packet without the version is still a packet
        loopx_version = "unknown"
    lines = ["## Environment", "",
             f"- test command: `{state['test_command']}`" + (f" (report written to `{state['report']}`)"
                                                            if state.get("report") else ""),
             f"- test interpreter: `{probed.get('interpreter') or '(not a Python command)'}`"
             + (f" (Python {probed['python']})" if probed.get("python") else ""),
             f"- test runner: {probed.get('runner') or '(unknown)'}",
             f"- tests run in the worktree `{state['worktree']}` (branch `{state['branch']['name']}`)",
             f"- LoopX {loopx_version} and loopx-issue-fix {__version__} on `{sys.executable}` "
             f"(Python {platform.python_version()}, {platform.platform()}); {gitrepo.git('.', 'version')}"]
    if state["user_checkout"]["dirty"]:
        lines.append(f"- the user's checkout `{state['repo']}` had uncommitted changes; they were not used and not "
                     f"touched ({', '.join(state['user_checkout']['dirty_paths'][:5])})")
    return lines + [""]


def render(tx, goal_id: str, state: dict, diff: dict, root_cause: str | None,
           probed: dict) -> tuple[str, list[str]]:
    """The packet's Markdown text and its warnings."""
    issue, branch, ver, repro = state["issue"], state["branch"], state["verification"], state["reproduction"]
    before, after = _evidence(tx, repro["evidence_id"]), _evidence(tx, ver["evidence_id"])
    warns = warnings(state, diff)
    lines = [f"# Hand-off: {issue['title']}", ""]
    for w in warns:
        lines += [f"> **WARNING: {w}**", ">"]
    if warns:
        lines.append("")
    lines += [
        f"- goal `{goal_id}`; repository `{state['repo']}`",
        f"- verified commit `{ver['commit']}` (tree `{ver['tree']}`, made by LoopX) on base `{branch['base_commit']}`",
        f"- publishing: {state['publish']['provider']} `{branch['name']}` to `{branch['remote']}`, after a user "
        "approves the production gate",
        "",
        "## Issue", "", issue["text"], "",
        "## Root cause", "", _root_cause(tx, goal_id, root_cause), "",
        "## Failing tests: red -> green", "",
        f"| test | before (`{repro['evidence_id']}`) | after (`{ver['evidence_id']}`) |",
        "|---|---|---|",
    ]
    for test_id in repro["failing"]:
        lines.append(f"| `{test_id}` | {_status(before, test_id)} | {_status(after, test_id)} |")
    lines += ["", f"{repro.get('passed', 0)} other test(s) passed at the reproduction; none of them fails now.", ""]
    lines += _tail(before, "Before the fix (reproduction)")
    lines += _tail(after, "After the fix (verification)")
    lines += _environment(state, probed)
    lines += ["## Attempts, in order", "", "| # | step | outcome | evidence | detail |", "|---|---|---|---|---|"]
    for n, a in enumerate(state.get("log", []), 1):
        detail = (a.get("detail") or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {n} | {a['step']} | {a['outcome']} | `{a['evidence_id']}` | {detail} |")
    failed = [a for a in state.get("log", []) if a["outcome"] not in ("red", "green", "published")]
    lines += ["", f"{len(failed)} failed attempt(s).", "",
              "## Diff", "",
              f"{diff['files_changed']} file(s) changed, {diff['insertions']} insertion(s), "
              f"{diff['deletions']} deletion(s) from `{branch['base_commit'][:12]}` to `{ver['commit'][:12]}`", "",
              "```", diff["stat"] or "(no changes)", "```", "",
              "```diff", diff["patch"] or "(empty)", "```", ""]
    return "\n".join(lines).rstrip() + "\n", warns

"""The reviewer-ready hand-off packet: one Markdown page a reviewer can act on.

It holds the issue, the root-cause note, the diff stat since the base commit, and the test
evidence of both sides (the failing reproduction and the passing verification: command, exit
status, output tail and output sha256), each tied to its evidence id in the ledger.
"""

from __future__ import annotations



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

    notes = [ev for ev in list_evidence(tx, goal_id) if ev.kind in ("root_cause", "note")]
    if notes:
        return notes[-1].summary
    return ("(not recorded: pass --root-cause TEXT, or record it with "
            "`loopx evidence add --run-id R --kind root_cause --summary TEXT`)")


def _test_section(title: str, ev: dict | None) -> list[str]:
    if ev is None:
        return [f"### {title}", "", "(no evidence recorded)", ""]
    d = ev["data"]
    status = "timed out" if d.get("timed_out") else ("passed" if d.get("passed") else f"failed, exit {d.get('exit_code')}")
    tail = (d.get("output_tail") or "").rstrip()
    return [
        f"### {title}",
        "",
        f"- evidence `{ev['id']}` (run `{ev['run_id']}`, {ev['created_at']})",
        f"- command: `{d.get('command')}`: **{status}** in {d.get('duration_seconds')}s",
        f"- commit `{d.get('commit')}`; output sha256 `{d.get('output_sha256')}` ({d.get('output_bytes')} bytes)",
        "",
        "```",
        tail[-3000:] if tail else "(no output)",
        "```",
        "",
    ]


def render(tx, goal_id: str, state: dict, diff: dict, root_cause: str | None) -> str:
    """The packet's Markdown text."""
    issue, branch = state["issue"], state["branch"]
    lines = [
        f"# Hand-off: {issue['title']}",
        "",
        f"- goal `{goal_id}`; repository `{state['repo']}`",
        f"- branch `{branch['name']}` from base `{branch['base_commit']}`; head `{diff['commit']}`",
        f"- attempts: reproduce {state['attempts']['reproduce']}, verify {state['attempts']['verify']}",
        f"- publishing (push to `{branch['remote']}` for a pull request) waits for the production gate "
        f"`{state['publish_gate']}`",
        "",
        "## Issue",
        "",
        issue["text"],
        "",
        "## Root cause",
        "",
        _root_cause(tx, goal_id, root_cause),
        "",
        "## Diff stat",
        "",
        f"{diff['files_changed']} file(s) changed, {diff['insertions']} insertion(s), {diff['deletions']} deletion(s)",
        "",
        "```",
        diff["stat"] or "(no changes to tracked files)",
        "```",
        "",
    ]
    if diff["untracked"]:
        lines += ["New untracked files: " + ", ".join(f"`{p}`" for p in diff["untracked"]), ""]
    lines += ["## Test evidence", ""]
    lines += _test_section("Before the fix (reproduction, expected to fail)",
                           _evidence(tx, (state.get("reproduction") or {}).get("evidence_id")))
    lines += _test_section("After the fix (verification, expected to pass)",
                           _evidence(tx, (state.get("verification") or {}).get("evidence_id")))
    return "\n".join(lines).rstrip() + "\n"

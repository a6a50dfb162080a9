"""``loopx issue-fix``: start an Issue-Fix goal and drive its phases under a run."""

from __future__ import annotations

import sys
from typing import Any

import click

from loopx.api import open_registry
from loopx import api

RUN_ID = click.option("--run-id", envvar="LOOPX_RUN_ID", default=None,
                      help="The run to act under (default: $LOOPX_RUN_ID, set by `loopx exec`).")
TIMEOUT = click.option("--timeout", type=click.FloatRange(1, 86400), default=None,
                       help="Seconds this step may take (default: the capability's quota need, cut to the run's "
                            "remaining wall budget; the contract names it).")


def _test_text(t: dict[str, Any] | None) -> str:
    if not t:
        return "tests not run"
    how = f"timed out after {t['timeout_seconds']:g}s" if t["timed_out"] else f"exit {t['exit_code']}"
    tail = "\n".join(t["output_tail"].rstrip().splitlines()[-15:])
    return f"`{t['command']}` {how} in {t['duration_seconds']}s\n{tail}"


@click.group("issue-fix", cls=api.cli.LoopxGroup, epilog="Example:\n  loopx issue-fix start --repo . --title 'Fix the rounding bug' --issue-file issue.md --test-command 'python -m pytest -q tests/test_rounding.py'")
def issue_fix() -> None:
    """Fix one issue in a git repository: reproduce, fix, verify, hand off, publish."""


@issue_fix.command(epilog="Example:\n  loopx issue-fix start --repo . --title 'Fix the rounding bug' --issue-file issue.md --test-command 'python -m pytest -q tests/test_rounding.py'")
@click.option("--repo", required=True, help="The git repository the issue is in (your checkout is not changed).")
@click.option("--title", required=True, help="Short name of the issue.")
@click.option("--issue-text", default=None, help="The issue, as text.")
@click.option("--issue-file", default=None, help="The issue, from a UTF-8 file.")
@click.option("--test-command", required=True,
              help="Shell command running the tests (pytest gets --junitxml added; other runners: {report} or --report).")
@click.option("--test-id", "test_ids", multiple=True, help="A test that must fail (repeatable; default: every failing test).")
@click.option("--report", default=None, help="The JUnit XML file a non-pytest runner writes, relative to the repository.")
@click.option("--allow-test-changes", is_flag=True, help="Let the fix edit the files holding the failing tests.")
@click.option("--base", default=None, help="The commit to start from (default: HEAD; uncommitted changes are not used).")
@click.option("--branch", default=None, help="Working branch to create (default issue-fix/<title>-<id>).")
@click.option("--remote", default="origin", show_default=True, help="Where publishing pushes the branch.")
@click.option("--publish", "provider", type=click.Choice(["push", "gh", "glab"]), default="push", show_default=True,
              help="How to publish: push the branch, or also open a pull (gh) / merge (glab) request.")
@click.option("--test-timeout", type=click.FloatRange(1, 86400), default=None,
              help="Seconds one test run may take (default 60, the capability's quota need).")
@click.option("--keep", is_flag=True, help="Keep the worktree and branch when the goal is closed (default: removed).")
@api.cli.operation_option
def start(repo: str, title: str, issue_text: str | None, issue_file: str | None, test_command: str,
          test_ids: tuple[str, ...], report: str | None, allow_test_changes: bool, base: str | None,
          branch: str | None, remote: str, provider: str, test_timeout: float | None, keep: bool,
          operation_id: str | None) -> None:
    """Create an Issue-Fix goal with a git worktree and branch of its own."""
    from loopx_issue_fix import workflow

    with open_registry() as reg:
        out = workflow.start(reg, api.cli.actor(), repo=repo, title=title, test_command=test_command, issue_text=issue_text,
                             issue_file=issue_file, test_ids=test_ids, report=report,
                             allow_test_changes=allow_test_changes, base=base, branch=branch, remote=remote,
                             provider=provider, test_timeout=test_timeout, keep=keep,
                             operation_id=operation_id)

    def text(o: dict[str, Any]) -> str:
        lines = [f"{o['goal_id']}  issue-fix goal: worktree {o['worktree']} on branch {o['branch']} "
                 f"(base {o['base_commit'][:12]})"]
        if o["user_checkout"]["dirty"]:
            lines.append(f"note: {o['repo']} has uncommitted changes; they are not used and not touched "
                         f"(the worktree starts from commit {o['base_commit'][:12]})")
        lines.append(f"next: loopx quota should-run --goal-id {o['goal_id']}")
        return "\n".join(lines)

    api.cli.emit(out, text)


@issue_fix.command(epilog="Example:\n  loopx issue-fix show --goal-id g-2ce4")
@api.cli.goal_option(help="The Issue-Fix goal (also as the first argument).")
@click.option("--packet", "print_packet", is_flag=True, help="Print the hand-off packet (checked against its recorded sha256).")
def show(goal_id: str, print_packet: bool) -> None:
    """An Issue-Fix goal's phase, attempts, todos, publish gate and next step.

    A recorded hand-off packet is shown only while its sha256 is the one recorded
    (else `artifact_tampered`)."""
    from loopx_issue_fix import workflow

    with open_registry() as reg:
        out = workflow.show(reg, goal_id)

    def text(o: dict[str, Any]) -> str:
        if print_packet:
            return o["packet"].rstrip("\n") if o["packet"] else f"no hand-off packet yet on {o['goal_id']}"
        todos = ", ".join(f"{k} {v}" for k, v in o["todo_status"].items())
        packet = (f"\n  packet {o['handoff']['packet']} (sha256 verified): sha256 {o['handoff']['sha256']}"
                  if o.get("handoff") else "")
        return (f"{o['goal_id']}  [{o['status']}]  {o['title']}\n  worktree {o['worktree']}  branch "
                f"{o['branch']['name']}\n  phase {o['phase']}  attempts {o['attempts']}\n  todos: {todos}\n"
                f"  publish gate {o['publish_gate']} ({o['publish_gate_status']})\n  next: {o['next']}{packet}"
                + _test_change_text(o.get("test_change")))

    api.cli.emit(out, text)


def _test_change_text(tc: dict[str, Any] | None) -> str:
    """The test-change gate verify requested, with the diff of the changed test files."""
    if not tc:
        return ""
    diff = tc["diff"].rstrip("\n") if tc["diff"] else "(no diff recorded: a gate from an older LoopX)"
    return (f"\n  test-change gate {tc['gate_id']} ({tc['status']}): {', '.join(tc['files'])}"
            + (f"\n  diff {tc['diff_path']} (sha256 verified)" if tc["diff_path"] else "") + f"\n{diff}")


@issue_fix.command(epilog="Example:\n  loopx issue-fix reproduce --run-id r-91ab")
@RUN_ID
@TIMEOUT
@api.cli.operation_option
def reproduce(run_id: str | None, timeout: float | None, operation_id: str | None) -> None:
    """Run the tests and record the failing test ids (exit 1 when nothing fails: not reproduced)."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.reproduce(reg, api.cli.actor(), run_id=run_id, timeout=timeout, operation_id=operation_id)
    api.cli.emit(out, lambda o: f"{'reproduced (red): ' + ', '.join(o['failing']) if o['reproduced'] else 'NOT reproduced'}"
                        f"\n{_test_text(o['test'])}\nphase {o['phase']}; evidence {o['evidence_id']}")
    if not out["reproduced"]:
        sys.exit(1)


@issue_fix.command(epilog="Example:\n  loopx issue-fix verify --run-id r-91ab")
@RUN_ID
@TIMEOUT
@api.cli.operation_option
def verify(run_id: str | None, timeout: float | None, operation_id: str | None) -> None:
    """Prove the fix and commit it (exit 1 unless the failing tests pass on changed code)."""
    from loopx_issue_fix import verify as step

    with open_registry() as reg:
        out = step.verify(reg, api.cli.actor(), run_id=run_id, timeout=timeout, operation_id=operation_id)
    api.cli.emit(out, lambda o: (f"verified (green): commit {o['commit']}" if o["verified"]
                         else f"not verified ({o['reason']}): {o['problem']}")
                        + f"\n{_test_text(o['test'])}\n{o['diff']['stat']}\nphase {o['phase']}; "
                          f"evidence {o['evidence_id']}")
    if not out["verified"]:
        sys.exit(1)


@issue_fix.command(epilog="Example:\n  loopx issue-fix handoff --run-id r-91ab --root-cause 'float division before rounding'")
@RUN_ID
@TIMEOUT
@click.option("--root-cause", default=None, help="What caused the issue, for the reviewer.")
@click.option("--output", type=click.Path(readable=False), default=None, help="Where to write a copy of the packet (it is always kept in LoopX's data directory; inside a "
                   "turn only beneath the step's own directories).")
@api.cli.operation_option
def handoff(run_id: str | None, timeout: float | None, root_cause: str | None, output: str | None,
            operation_id: str | None) -> None:
    """Write the reviewer packet and request the publish gate."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.handoff(reg, api.cli.actor(), run_id=run_id, root_cause=root_cause, output=output, timeout=timeout,
                             operation_id=operation_id)
    api.cli.emit(out, lambda o: "".join(f"WARNING: {w}\n" for w in o["warnings"])
                        + f"hand-off packet: {o['packet_path']} (sha256 {o['packet_sha256'][:16]}...)\n"
                          f"publish gate {o['gate_id']} requested; phase {o['phase']}; evidence {o['evidence_id']}")


@issue_fix.command(epilog="Example:\n  loopx issue-fix publish --run-id r-91ab")
@RUN_ID
@TIMEOUT
@api.cli.operation_option
def publish(run_id: str | None, timeout: float | None, operation_id: str | None) -> None:
    """Publish exactly the verified commit (only after a user approved the gate)."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.publish(reg, api.cli.actor(), run_id=run_id, timeout=timeout, operation_id=operation_id)
    api.cli.emit(out, lambda o: f"pushed {o['commit']} to {o['remote']} {o['branch']}"
                        + (f"; {o['provider']}: {o['request']}" if o.get("request") else "") + "; the goal is closed")


@issue_fix.command(epilog="Example:\n  loopx issue-fix close g-2ce4")
# The goal is positional like every command's (a merge brought close in with only --goal-id).
@api.cli.goal_option(help="The Issue-Fix goal (also as the first argument).")
@click.option("--keep", is_flag=True, help="Keep the goal's worktree and branch.")
@click.option("--reason", default=None, help="Why the goal is closed.")
@api.cli.operation_option
def close(goal_id: str, keep: bool, reason: str | None, operation_id: str | None) -> None:
    """Close an Issue-Fix goal and remove its worktree and branch (--keep to keep them)."""
    from loopx_issue_fix import workflow

    with open_registry() as reg:
        out = workflow.close(reg, api.cli.actor(), goal_id, keep=keep, reason=reason, operation_id=operation_id)
    api.cli.emit(out, lambda o: f"{o['goal_id']} closed; " + ("kept " + o["worktree"] if o["kept"]
                                                       else "removed: " + (", ".join(o["removed"]) or "nothing")))


@issue_fix.command(epilog="Example:\n  loopx issue-fix clean --repo .")
@click.option("--repo", required=True, help="The git repository whose Issue-Fix leftovers to remove.")
def clean(repo: str) -> None:
    """Remove the worktrees and branches that closed (or unknown) Issue-Fix goals left behind."""
    from loopx_issue_fix import workflow

    with open_registry() as reg:
        out = workflow.clean(reg, repo)
    api.cli.emit(out, lambda o: "\n".join(f"{r['goal_id']} ({r['status']}): removed {', '.join(r['removed'])}"
                                   for r in o["removed"]) or "nothing to remove")

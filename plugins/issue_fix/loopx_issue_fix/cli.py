"""``loopx issue-fix``: start an Issue-Fix goal and drive its phases under a run."""

from __future__ import annotations

import sys

import click

from loopx.api import LoopxGroup, actor, emit, open_registry, operation_option

RUN_ID = click.option("--run-id", envvar="LOOPX_RUN_ID", default=None,
                      help="The run to act under (default: $LOOPX_RUN_ID, set by `loopx exec`).")
TIMEOUT = click.option("--timeout", type=click.FloatRange(1, 86400), default=None,
                       help="Seconds the test command may take (default 1800).")


def _test_text(out: dict) -> str:
    t = out["test"]
    status = "timed out" if t["timed_out"] else ("passed" if t["passed"] else f"failed (exit {t['exit_code']})")
    tail = "\n".join(t["output_tail"].rstrip().splitlines()[-15:])
    return f"test `{t['command']}` {status} in {t['duration_seconds']}s\n{tail}"


@click.group("issue-fix", cls=LoopxGroup)
def issue_fix():
    """Fix one issue in a local git repository: reproduce, fix, verify, hand off, publish."""


@issue_fix.command()
@click.option("--repo", required=True, help="The git working tree the issue is in.")
@click.option("--title", required=True, help="Short name of the issue.")
@click.option("--issue-text", default=None, help="The issue, as text.")
@click.option("--issue-file", default=None, help="The issue, from a UTF-8 file.")
@click.option("--test-command", required=True, help="Shell command that fails while the issue exists.")
@click.option("--branch", default=None, help="Working branch to create (default issue-fix/<title>-<id>).")
@click.option("--remote", default="origin", show_default=True, help="Where publishing pushes the branch.")
@operation_option
def start(repo, title, issue_text, issue_file, test_command, branch, remote, operation_id):
    """Create an Issue-Fix goal: todos, the test action, and a production gate on publishing."""
    from loopx_issue_fix import workflow

    with open_registry() as reg:
        out = workflow.start(reg, actor(), repo=repo, title=title, test_command=test_command,
                             issue_text=issue_text, issue_file=issue_file, branch=branch, remote=remote,
                             operation_id=operation_id)
    emit(out, lambda o: f"{o['goal_id']}  issue-fix goal on branch {o['branch']} of {o['repo']}\n"
                        f"next: loopx quota should-run --goal-id {o['goal_id']}")


@issue_fix.command()
@click.option("--goal-id", required=True)
def show(goal_id):
    """An Issue-Fix goal's phase, attempts, todos, publish gate and next step."""
    from loopx_issue_fix import workflow

    with open_registry() as reg:
        out = workflow.show(reg, goal_id)

    def text(o):
        todos = ", ".join(f"{k} {v}" for k, v in o["todo_status"].items())
        return (f"{o['goal_id']}  [{o['status']}]  {o['title']}\n  repo {o['repo']}  branch {o['branch']['name']}\n"
                f"  phase {o['phase']}  attempts {o['attempts']}\n  todos: {todos}\n"
                f"  publish gate {o['publish_gate']} ({o['publish_gate_status']})\n  next: {o['next']}")

    emit(out, text)


@issue_fix.command()
@RUN_ID
@TIMEOUT
@operation_option
def reproduce(run_id, timeout, operation_id):
    """Run the test command and see it fail (exit 1 when it passes: not reproduced)."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.reproduce(reg, actor(), run_id=run_id, timeout=timeout, operation_id=operation_id)
    emit(out, lambda o: f"{'reproduced (red)' if o['reproduced'] else 'NOT reproduced'}: {_test_text(o)}\n"
                        f"phase {o['phase']}; evidence {o['evidence_id']}")
    if not out["reproduced"]:
        sys.exit(1)


@issue_fix.command()
@RUN_ID
@TIMEOUT
@operation_option
def verify(run_id, timeout, operation_id):
    """Run the test command on the fix (exit 1 unless it passes on changed code)."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.verify(reg, actor(), run_id=run_id, timeout=timeout, operation_id=operation_id)
    emit(out, lambda o: f"{'verified (green)' if o['verified'] else 'not verified: ' + str(o['reason'])}: "
                        f"{_test_text(o)}\n{o['diff']['stat']}\ncommit {o['commit']}; phase {o['phase']}; "
                        f"evidence {o['evidence_id']}")
    if not out["verified"]:
        sys.exit(1)


@issue_fix.command()
@RUN_ID
@click.option("--root-cause", default=None, help="What caused the issue, for the reviewer.")
@click.option("--output", default=None, help="Where to write the packet (default: inside the repo's .git).")
@operation_option
def handoff(run_id, root_cause, output, operation_id):
    """Write the reviewer-ready packet: issue, root cause, diff stat, test evidence."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.handoff(reg, actor(), run_id=run_id, root_cause=root_cause, output=output,
                             operation_id=operation_id)
    emit(out, lambda o: f"hand-off packet: {o['packet_path']} (sha256 {o['packet_sha256'][:16]}...)\n"
                        f"phase {o['phase']}; evidence {o['evidence_id']}")


@issue_fix.command()
@RUN_ID
@operation_option
def publish(run_id, operation_id):
    """Push the branch for a pull request (only after a user approved the production gate)."""
    from loopx_issue_fix import phases

    with open_registry() as reg:
        out = phases.publish(reg, actor(), run_id=run_id, operation_id=operation_id)
    emit(out, lambda o: f"pushed {o['branch']} ({o['commit'][:12]}) to {o['remote']}; open a pull request from it")

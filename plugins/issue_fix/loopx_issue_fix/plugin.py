"""The hook implementations LoopX loads through the ``loopx`` entry point ``issue_fix``.

This module stays cheap to import (``quota should-run`` loads it before every agent turn):
everything heavier is imported inside the hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopx import hookimpl

from loopx_issue_fix import __version__

if TYPE_CHECKING:
    import click

    from loopx.api import registrars
    from loopx.api import ReadTx, Writer, gates, goals


@hookimpl
def loopx_register_capabilities(register: registrars.Capabilities) -> None:
    """Declare the ``issue_fix`` capability: its state, quota needs, commands and actions."""
    from loopx.api import Capability

    register(Capability(
        name="issue_fix",
        version=__version__,
        summary="Fix one issue in a git repository, in a worktree of its own: failing tests (red), fix, "
                "verify (green, committed), hand off; publishing exactly the verified commit waits for a user.",
        owns=("issue_fix",),
        reads=("goals", "todos", "gates", "runs", "evidence"),
        quota={"turns": 1, "tokens": 0, "wall_seconds": 60},
        commands=("issue-fix",),
        # A user's: starting (a goal, a worktree) and closing a fix, and removing what closed ones left.
        user_commands=("issue-fix start", "issue-fix close", "issue-fix clean"),
        actions=("reproduce", "verify", "handoff", "publish"),
        doc="docs/capabilities/issue_fix.md",
    ))


@hookimpl
def loopx_register_commands(cli: click.Group) -> None:
    """Add ``loopx issue-fix`` (start, show, reproduce, verify, handoff, publish)."""
    from loopx_issue_fix.cli import issue_fix

    cli.add_command(issue_fix)


@hookimpl
def loopx_contract_actions(tx: ReadTx, goal: goals.Goal, run_id: str | None,
                           remaining: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """For an Issue-Fix goal, the next action of its current phase (nothing for other goals)."""
    from loopx_issue_fix.workflow import contract_actions

    return contract_actions(tx, goal, run_id, remaining)


@hookimpl
def loopx_gate_decided(writer: Writer, gate: gates.Gate, decision: str) -> None:
    """A rejected publish gate sends the goal back to ``fix``; reopened, the hand-off stands again."""
    from loopx_issue_fix.rejection import gate_decided

    gate_decided(writer, gate, decision)


#: The capability's own refusals (``docs/capabilities/issue_fix.md`` says when each happens).
ERROR_CODES = {
    "issue_fix.not_a_test_failure": "the test run shows no test failing: a time-out, a command not found, "
                                    "no JUnit report, a collection error or no tests",
    "issue_fix.tests_weakened": "a failing test, or the file holding it, was edited, deleted or skipped",
    "issue_fix.tests_changed": "the fix changed the tests' infrastructure: a conftest.py, a test module, pytest's "
                               "configuration or a data file the base test run read (names the files)",
    "issue_fix.runner_tampered": "the test run's records disagree (LoopX's judge, pytest's results, its JUnit XML, "
                                 "the exit status) or pytest's reporting machinery changed while the tests ran",
    "issue_fix.environment_changed": "the test interpreter's start-up files (.pth, sitecustomize) changed since start",
    "issue_fix.git_changed": "the remote's refs changed since LoopX's last step: a push LoopX did not make",
    "issue_fix.evidence_changed": "a recorded results file is gone or no longer matches the sha256 in its evidence",
    "issue_fix.changed_since_verify": "the branch head or the worktree is not the verified commit any more",
    "issue_fix.tree_mismatch": "the commit to publish does not hold the tree verify exported and tested (or not on "
                               "the base commit), or the object store does not hold a blob as its id says",
    "issue_fix.git_tampered": "the git links LoopX follows (the worktree's .git file, its gitdir and commondir, "
                              "the user's .git) are not the ones LoopX or git made",
    "issue_fix.publish_unavailable": "the chosen publishing tool (gh, glab) is not installed",
    "issue_fix.not_reproduced": "verify, handoff or publish before a red reproduction is recorded",
    "issue_fix.wrong_phase": "a step the goal's current phase does not take (the message names what it waits for)",
    "issue_fix.not_an_issue_fix_goal": "the goal has no Issue-Fix state",
    "issue_fix.not_a_repository": "--repo is not a directory inside a git working tree with a commit",
    "issue_fix.branch_exists": "the working branch to create already exists",
    "issue_fix.git_failed": "a local git command failed, timed out, or git is not installed",
    "issue_fix.packet_unwritable": "the hand-off packet cannot be written where it should go",
    "issue_fix.publish_failed": "git push failed or timed out, the remote does not hold the verified sha, "
                                "or gh/glab could not open the request",
}


@hookimpl
def loopx_register_error_codes(register: registrars.ErrorCodes) -> None:
    """Register the ``issue_fix.*`` refusal codes."""
    for code, description in ERROR_CODES.items():
        register(code, description)

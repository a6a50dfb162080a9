"""The hook implementations LoopX loads through the ``loopx`` entry point ``issue_fix``.

This module stays cheap to import (``quota should-run`` loads it before every agent turn):
everything heavier is imported inside the hooks.
"""

from __future__ import annotations

from loopx import hookimpl

from loopx_issue_fix import __version__


@hookimpl
def loopx_register_capabilities(register):
    """Declare the ``issue_fix`` capability: its state, quota needs, commands and actions."""
    from loopx.api import Capability

    register(Capability(
        name="issue_fix",
        version=__version__,
        summary="Fix one issue in a local git repository: reproduce (red), fix, verify (green), hand off; "
                "publishing waits for a production gate.",
        owns=("issue_fix",),
        reads=("goals", "todos", "gates", "runs", "evidence"),
        quota={"turns": 1, "tokens": 0, "wall_seconds": 60},
        commands=("issue-fix",),
        actions=("reproduce", "verify", "handoff"),
        doc="docs/capabilities/issue_fix.md",
    ))


@hookimpl
def loopx_register_commands(cli):
    """Add ``loopx issue-fix`` (start, show, reproduce, verify, handoff, publish)."""
    from loopx_issue_fix.cli import issue_fix

    cli.add_command(issue_fix)


@hookimpl
def loopx_contract_actions(tx, goal, run_id, remaining):
    """For an Issue-Fix goal, the next action of its current phase (nothing for other goals)."""
    from loopx_issue_fix.workflow import contract_actions

    return contract_actions(tx, goal, run_id)

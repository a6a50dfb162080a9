"""``loopx project_prompt``: create, list, show, pause, resume and close goals."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option
from loopx.cli.op_options import op_option
from loopx.cli.output import LoopxGroup, actor, emit, open_registry, operation_option


def goal_text(goal: dict) -> str:
    """A goal for people."""
    lines = [f"{goal['id']}  [{goal['status']}]  {goal['title']}  (revision {goal['revision']})"]
    if goal.get("description"):
        lines.append(f"  {goal['description']}")
    for c in goal.get("criteria", []):
        lines.append(f"  [{'x' if c['met'] else ' '}] {c['text']}")
    if goal.get("status_reason"):
        lines.append(f"  reason: {goal['status_reason']}")
    if goal.get("capabilities"):
        lines.append(f"  capabilities: {', '.join(goal['capabilities'])}")
    return "\n".join(lines)


@click.group(cls=LoopxGroup)
def project_prompt():
    """Goals: the durable work objects agents pursue."""


@project_prompt.command()
@click.option("--title", required=True, help="Short name of the goal.")
@click.option("--description", default="", help="The objective, in a paragraph or a few (64 KiB at most).")
@click.option("--description-file", type=click.File("rb"), default=None,
              help="Read the description from a file ('-' for stdin) instead.")
@click.option("--criterion", "criteria", multiple=True, help="A success criterion (repeatable).")
@click.option("--parallel-runs", is_flag=True, help="Let several agents hold runs on this goal at once.")
@click.option("--capability", "capabilities", multiple=True,
              help="An installed capability the goal uses (repeatable; `loopx capabilities list`). Only these add "
                   "their steps to its contracts.")
@click.option("--project", default=None, type=click.Path(file_okay=False),
              help="The directory the goal works on (default: this one). Its agent works in a workspace LoopX "
                   "makes from it, never in it (`loopx workspace`).")
@click.option("--workspace", default=None, type=click.Path(file_okay=False),
              help="Where the goal's workspace goes (default: LoopX's data directory).")
@operation_option
def create(title, description, description_file, criteria, parallel_runs, capabilities, project, workspace,
           operation_id):
    """Create a goal."""
    import os

    from loopx.domain import goals
    from loopx.values.errors import LoopxError
    from loopx.values.validate import LIMITS

    if description_file is not None:
        # Read one byte past the limit: enough to refuse an oversized file without slurping it.
        raw = description_file.read(LIMITS["description"] + 1)
        try:
            description = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LoopxError("invalid_argument", "--description-file is not valid UTF-8") from None
        if len(raw) > LIMITS["description"]:
            raise LoopxError("invalid_argument",
                             f"--description-file is over the {LIMITS['description']}-byte limit")

    with open_registry() as reg:
        goal = goals.create(reg, actor(), title=title, description=description, criteria=criteria,
                            parallel_runs=parallel_runs, capabilities=capabilities, operation_id=operation_id,
                            project=project or os.getcwd(), workspace=workspace)
    emit(goal, goal_text)


@project_prompt.command("list")
@click.option("--status", default="active", type=click.Choice(["open", "paused", "closed", "active", "all"]),
              help="Which goals (default: active = everything not closed).")
@click.option("--limit", default=50, type=int, help="Page size, newest first (1-1000).")
@click.option("--cursor", default=None, help="The next page: the id of the last goal the previous page listed.")
def list_command(status, limit, cursor):
    """List goals, newest first, one page at a time (--cursor LAST_ID for the next)."""
    from loopx.domain import goals

    with open_registry() as reg:
        found = goals.list_goals(reg, status=status, limit=limit, cursor=cursor)

    def text(gs):
        lines = [f"{g['id']}  [{g['status']}]  {g['title']}" for g in gs] or ["no goals"]
        if len(gs) == limit:
            lines.append(f"more: loopx project-prompt list --cursor {gs[-1]['id']}")
        return "\n".join(lines)

    emit(found, text)


@project_prompt.command()
@op_option("goal_status", "goal_id")
def show(goal_id):
    """Show one goal."""
    from loopx.domain import goals

    with open_registry() as reg:
        emit(goals.show(reg, goal_id), goal_text)


@project_prompt.command("criterion")
@goal_option()
@click.option("--number", required=True, type=int, help="Which criterion, counting from 1 as `show` lists them.")
@click.option("--met/--unmet", default=True, help="Mark it met (default) or not met again.")
@operation_option
def criterion(goal_id, number, met, operation_id):
    """Mark a success criterion met (a user's judgement, never an agent's)."""
    from loopx.domain import goals

    with open_registry() as reg:
        goal = goals.mark_criterion(reg, actor(), goal_id, number, met=met, operation_id=operation_id)
    emit(goal, goal_text)


@project_prompt.command("capabilities")
@goal_option()
@click.option("--enable", "enable", multiple=True, help="Let an installed capability serve the goal (repeatable).")
@click.option("--disable", "disable", multiple=True, help="Stop a capability serving the goal (repeatable).")
@operation_option
def capabilities_command(goal_id, enable, disable, operation_id):
    """Show or change the capabilities a goal uses (a user's choice, never an agent's).

    Only the capabilities a goal uses (and those declared on for every goal) add
    steps to its contracts, veto its turns or hear its events; the next contract follows.
    """
    from loopx.domain import goals

    with open_registry() as reg:
        if enable or disable:
            goal = goals.set_capabilities(reg, actor(), goal_id, enable=enable, disable=disable,
                                          operation_id=operation_id)
        else:
            goal = goals.show(reg, goal_id)

    def text(g):
        from loopx.seam import capabilities

        always = sorted(c.name for c in capabilities.load().values() if c.default_on)
        line = f"{g['id']}  capabilities: {', '.join(g['capabilities']) or 'none'}"
        return line + (f"  (on for every goal: {', '.join(always)})" if always else "")

    emit(goal, text)


def _transition(verb: str, doc: str):
    @goal_option()
    @click.option("--reason", default=None, help="Why (kept in the ledger).")
    @operation_option
    def command(goal_id, reason, operation_id):
        from loopx.domain import goals

        with open_registry() as reg:
            goal = goals.transition(reg, actor(), verb, goal_id, reason=reason, operation_id=operation_id)
            if verb == "close":  # the goal's own agent-CLI state goes with it (docs/agents.md)
                from loopx.turn.executors import homes

                homes.remove(reg, goal["id"])
        emit(goal, goal_text)

    command.__doc__ = doc
    project_prompt.command(verb)(command)


_transition("pause", "Pause a goal: agents get `wait` until it is resumed.")
_transition("resume", "Resume a paused goal.")
_transition("close", "Close a goal for good: agents get `stop`.")
_transition("retry", "Let agents try again after the same step failed run after run (repeated_failure).")

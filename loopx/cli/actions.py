"""``loopx action``: the goal's allow-list of commands (user only to change)."""

from __future__ import annotations

import shlex

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.output import LoopxGroup, actor, emit, open_registry, operation_option


def _line(a: dict) -> str:
    held = a.get("held_by")
    gate = f"  [held by gate {held['gate_id']}: {held['status']}]" if held else ""
    return f"{a['name']:<16} {shlex.join(a['argv'])}{gate}"


@click.group(cls=LoopxGroup)
def action():
    """Commands an agent may run for a goal (`loopx exec --run-id R --action NAME`)."""


@action.command(context_settings={"ignore_unknown_options": True})
@goal_option(positional=False)
@click.option("--name", required=True, help="Short name, e.g. test.")
@id_option("gate", required=False, help="Keep the action out of contracts until this gate is approved.")
@operation_option
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True)
def add(goal_id, name, gate_id, operation_id, argv):
    """Allow a command: `loopx action add --goal-id G --name test -- pytest -q` (user only)."""
    from loopx import actions

    with open_registry() as reg:
        out = actions.add(reg, actor(), goal_id=goal_id, name=name, argv=list(argv), gate_id=gate_id,
                          operation_id=operation_id)
    emit(out, lambda a: f"allowed {a['name']}: {shlex.join(a['argv'])}")


@action.command("list")
@goal_option()
def list_command(goal_id):
    """The goal's allowed commands, and which a gate holds back."""
    from loopx import actions

    with open_registry() as reg:
        emit(actions.list_for(reg, goal_id), lambda xs: "\n".join(map(_line, xs)) or "no actions")


@action.command()
@goal_option()
@click.option("--name", required=True)
@operation_option
def remove(goal_id, name, operation_id):
    """Take a command off the allow-list (user only)."""
    from loopx import actions

    with open_registry() as reg:
        out = actions.remove(reg, actor(), goal_id=goal_id, name=name, operation_id=operation_id)
    emit(out, lambda a: f"removed {a['name']}")

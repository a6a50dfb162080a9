"""``loopx action``: the goal's allow-list of commands (user only to change)."""

from __future__ import annotations

import shlex

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.output import LoopxCommand, LoopxGroup, actor, emit, open_registry, operation_option


def _line(a: dict) -> str:
    held = a.get("held_by")
    gate = f"  [held by gate {held['gate_id']}: {held['status']}]" if held else ""
    return f"{a['name']:<16} {shlex.join(a['argv'])}{gate}"


@click.group(cls=LoopxGroup)
def action():
    """Commands an agent may run for a goal (`loopx exec --run-id R --action NAME`)."""


class _GoalBeforeArgv(LoopxCommand):
    """``action add G --name a -- cmd``: a goal id given positionally, before the ``--`` that
    starts the command, is the goal (click alone would take it as the command's first word)."""

    def parse_args(self, ctx, args):
        cut = args.index("--") if "--" in args else len(args)
        if "--help" in args[:cut] or "-h" in args[:cut]:
            return super().parse_args(ctx, args)
        takes_value = {o for p in self.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
        loose, i = [], 0
        while i < cut:
            word = args[i]
            if word in takes_value:
                i += 2
                continue
            if not word.startswith("-"):
                loose.append(i)
            i += 1
        goal_given = "--goal-id" in args[:cut] or any(a.startswith("--goal-id=") for a in args[:cut])
        if "--" not in args and len(loose) <= (0 if goal_given else 1):
            # Without a command the goal id would be taken as the command's first word, and the
            # error would blame the goal: name what is missing.
            raise click.UsageError("missing the command to allow: give it after `--`, e.g. "
                                   "`loopx action add G --name test -- pytest -q`", ctx)
        if "--" in args and len(loose) > 1:
            words = ", ".join(repr(args[j]) for j in loose)
            raise click.UsageError(f"more than one word before `--` ({words}): the goal is one word, and a "
                                   "value with spaces needs quotes", ctx)
        if "--" in args:
            if len(loose) == 1:
                pos = loose[0]
                goal, head = args[pos], args[:pos] + args[pos + 1:cut]
                if "--goal-id" in head:
                    given = head[head.index("--goal-id") + 1]
                    if given != goal:
                        raise click.UsageError(f"two goal ids given: {goal} and --goal-id {given}", ctx)
                    args = head + args[cut:]
                else:
                    args = ["--goal-id", goal, *head, *args[cut:]]
        return super().parse_args(ctx, args)


@action.command(cls=_GoalBeforeArgv, context_settings={"ignore_unknown_options": True})
@goal_option(positional=False, help="The goal (a whole id or a unique prefix; may also be given as the first "
                                    "argument, before the `--`).")
@click.option("--name", required=True, help="Short name, e.g. test.")
@id_option("gate", required=False, help="Keep the action out of contracts until this gate is approved.")
@operation_option
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True)
def add(goal_id, name, gate_id, operation_id, argv):
    """Allow a command: `loopx action add G --name test -- pytest -q` (user only)."""
    from loopx.domain import actions

    with open_registry() as reg:
        out = actions.add(reg, actor(), goal_id=goal_id, name=name, argv=list(argv), gate_id=gate_id,
                          operation_id=operation_id)
    emit(out, lambda a: f"allowed {a['name']}: {shlex.join(a['argv'])}")


@action.command("list")
@goal_option()
def list_command(goal_id):
    """The goal's allowed commands, and which a gate holds back."""
    from loopx.domain import actions

    with open_registry() as reg:
        emit(actions.list_for(reg, goal_id), lambda xs: "\n".join(map(_line, xs)) or "no actions")


@action.command()
@goal_option()
@click.option("--name", required=True)
@operation_option
def remove(goal_id, name, operation_id):
    """Take a command off the allow-list (user only)."""
    from loopx.domain import actions

    with open_registry() as reg:
        out = actions.remove(reg, actor(), goal_id=goal_id, name=name, operation_id=operation_id)
    emit(out, lambda a: f"removed {a['name']}")

"""The click options of an agent-facing command, derived from its declaration (:mod:`loopx.operations`).

``@op_option("todo_add", "text")`` stands where the command's ``--text`` option stood: the flag,
type, default and help come from the operation's :class:`~loopx.operations.Param`, so the option
the CLI parses is the one the MCP tool and the broker's encoding are derived from. Options only
a user's command line has (``--operation-id``, ``--dry-run``...) stay written on the command.
"""

from __future__ import annotations

import click

from loopx.cli.ids import RUN_ID_HELP, goal_option, id_option
from loopx.operations import OPERATIONS

_CLICK_TYPES = {"integer": int, "number": float}


def op_option(tool: str, name: str):
    """The click option (or argument) of parameter ``name`` of operation ``tool``."""
    p = OPERATIONS[tool].param(name)
    kw = dict(p.cli or {})
    dest = kw.pop("dest", p.name)
    kind = p.id_kind
    if kind == "goal":
        return goal_option(**kw)
    if p.form == "argv":
        return click.argument(dest, nargs=-1, type=click.UNPROCESSED)
    if p.form == "repeat":
        kw["multiple"] = True
    if kind is not None:
        if "envvar" in kw and "help" not in kw:
            kw["help"] = RUN_ID_HELP  # a step's own run, from its environment
        return id_option(kind, p.option, dest, required=kw.pop("required", False), **kw)
    choices = kw.pop("choices", None) or p.schema.get("enum")
    if choices:
        kw["type"] = click.Choice(choices)
    elif p.schema.get("type") in _CLICK_TYPES:
        kw["type"] = _CLICK_TYPES[p.schema["type"]]
    if not kw.get("required"):
        kw.setdefault("default", None)
    return click.option(p.option, dest, **kw)

"""Ids on the command line: unique prefixes, a positional goal id, and shell completion.

Every id option (``--goal-id``, ``--todo-id``, ``--gate-id``, ``--run-id``...) takes the whole id
or any unique prefix of it (``g-2ce4``, or just ``2ce4``); a prefix two ids share is refused with
``id_ambiguous`` and the candidates. A whole id is passed through untouched without opening the
registry, so what an agent harness runs before every turn costs nothing extra.

Commands that act on one goal also take the goal id positionally (``loopx project-prompt show G``);
:class:`GoalIdOption` marks the option and :func:`merge_goal_argument` folds the two together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from loopx.values.validate import ID_KINDS

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    _F = TypeVar("_F", bound=Callable[..., Any])  # a click command function, returned as it came

# Where the root command keeps the --registry value; loopx.cli.output re-exports it (output
# imports this module, so the name lives here to keep the import one-way).
REGISTRY_KEY = "loopx.ledger.registry"

# kind -> (id letter, table); the letters are loopx.values.validate's, the one definition of an id. Ids are
# globally unique, so a prefix is looked up table-wide.
TABLES = {kind: (ID_KINDS[kind], table) for kind, table in {
    "goal": "goals", "gate": "gates", "todo": "todos", "run": "runs", "contract": "contracts",
    "evidence": "evidence", "reward": "rewards"}.items()}
_HEX = frozenset("0123456789abcdef")
_SHOWN = 5  # candidates named in an id_ambiguous message
GOAL_ARG = "goal_id_arg"


def _prefix(kind: str, value: str) -> str | None:
    """The id prefix ``value`` stands for, or None if it cannot be one (left for the command to refuse)."""
    letter = TABLES[kind][0]
    if value.startswith(letter + "-"):
        digits = value[2:]
    else:
        digits = value
        value = f"{letter}-{value}"
    if not digits or len(digits) > 12 or not _HEX.issuperset(digits):
        return None
    return value


def _registry_url(ctx: click.Context | None):
    if ctx is None:
        return None
    url = ctx.meta.get(REGISTRY_KEY)
    if url is None:
        # During shell completion the root callback never ran; its parsed params are there.
        url = ctx.find_root().params.get("registry_url")
    return url


def _matching(ctx, kind: str, prefix: str, limit: int, goal_id: str | None = None) -> list[str]:
    """Ids of ``kind`` starting with ``prefix`` (a primary-key range scan), at most ``limit``."""
    from loopx.ledger.registry import Registry

    from loopx.store.queries.status import ids_in_range

    table = TABLES[kind][1]
    with Registry.open(_registry_url(ctx), readonly=True) as reg, reg.read() as tx:
        return ids_in_range(tx, table, prefix, limit, goal_id if kind != "goal" else None)


def resolve(ctx, kind: str, value: str, label: str) -> str:
    """``value`` as a whole id of ``kind``: itself if whole, else the one id it is a prefix of."""
    from loopx.values.errors import LoopxError

    prefix = _prefix(kind, value)
    if prefix is None or len(prefix) == 14:
        return value  # a whole id, or not id-shaped at all: the command checks it as before
    try:
        found = _matching(ctx, kind, prefix, _SHOWN + 1)
    except LoopxError as err:
        if err.code in ("registry_unavailable", "registry_readonly"):
            found = []  # no registry yet: nothing to expand to
        else:
            raise
    if len(found) == 1:
        return found[0]
    if not found:
        # invalid_argument, as for any other malformed id: a prefix is not an id until it names one.
        raise LoopxError("invalid_argument", f"{label}: no {kind} id starts with {prefix} (give a whole id, "
                                             f"{TABLES[kind][0]}- and 12 hex digits, or a unique prefix of one)")
    shown = ", ".join(found[:_SHOWN]) + (", ..." if len(found) > _SHOWN else "")
    raise LoopxError("id_ambiguous", f"{label}: {prefix} is the start of more than one {kind} id: {shown}",
                     candidates=found[:_SHOWN])


class IdType(click.ParamType):
    """An id of one kind: whole, or a unique prefix; completed from the registry."""

    def __init__(self, kind: str):
        self.kind = kind
        self.name = f"{kind}_id"

    def get_metavar(self, param, ctx=None) -> str:
        return self.kind.upper() + "_ID"

    def convert(self, value, param, ctx):
        if not isinstance(value, str) or (len(value) == 14 and value[1:2] == "-"):
            return value
        label = _label(param, self.kind)
        return resolve(ctx, self.kind, value, label)

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        letter = TABLES[self.kind][0] + "-"
        prefix = _prefix(self.kind, incomplete) if incomplete not in ("", letter) else letter
        if prefix is None:
            return []
        goal_id = ctx.params.get("goal_id") or ctx.params.get(GOAL_ARG) or _goal_on_line()
        try:
            ids = _matching(ctx, self.kind, prefix, 200, goal_id=goal_id if isinstance(goal_id, str) else None)
        except Exception:
            return []  # completion must never print a traceback into the user's shell
        return [CompletionItem(i) for i in ids]


def _goal_on_line() -> str | None:
    """A whole goal id among the words being completed (bash and zsh pass them in COMP_WORDS).

    click stops parsing at the option still waiting for its value, before positional
    arguments are assigned, so a positional GOAL_ID never reaches ``ctx.params`` here.
    """
    import os

    for word in os.environ.get("COMP_WORDS", "").split():
        if len(word) == 14 and word.startswith("g-") and _HEX.issuperset(word[2:]):
            return word
    return None


def _label(param, kind: str) -> str:
    if param is None:
        return f"{kind} id"
    if param.name == GOAL_ARG:
        return "GOAL_ID"
    return param.opts[0] if param.opts else param.name


GOAL = IdType("goal")
TODO = IdType("todo")
GATE = IdType("gate")
RUN = IdType("run")
RUN_ID_HELP = "The run (default: env LOOPX_RUN_ID, set for commands started by `loopx exec`)."
GOAL_HELP = "The goal (a whole id or a unique prefix; may also be given as the first argument)."


class GoalIdOption(click.Option):
    """``--goal-id``, whose value may also come positionally; required-ness is checked after merging."""

    def __init__(self, *args, goal_required: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.goal_required = goal_required


def goal_option(positional: bool = True, required: bool = True,
                help: str | None = None) -> Callable[[_F], _F]:
    """``--goal-id`` (any unique prefix), and unless ``positional=False`` an optional ``[GOAL_ID]`` argument."""

    def decorate(fn: _F) -> _F:
        fn = click.option("--goal-id", "goal_id", cls=GoalIdOption, type=GOAL, default=None,
                          goal_required=required, help=help or (GOAL_HELP if positional else
                                                                "The goal (a whole id or a unique prefix)."))(fn)
        if positional:
            fn = click.argument(GOAL_ARG, metavar="[GOAL_ID]", required=False, type=GOAL)(fn)
        return fn

    return decorate


def id_option(kind: str, *names: str, required: bool = True, help: str | None = None,
              **kwargs: Any) -> Callable[[_F], _F]:
    """An id option of ``kind`` taking a whole id or a unique prefix, completed from the registry."""
    text = help or f"The {kind} (a whole id or a unique prefix)."
    return click.option(*(names or (f"--{kind}-id",)), type=IdType(kind), required=required, help=text, **kwargs)


def merge_goal_argument(command: click.Command, ctx: click.Context) -> None:
    """Fold a positional GOAL_ID into ``goal_id``; refuse two different ones or none when required."""
    if GOAL_ARG not in ctx.params and not any(isinstance(p, GoalIdOption) for p in command.params):
        return
    positional = ctx.params.pop(GOAL_ARG, None)
    if positional is not None:
        given = ctx.params.get("goal_id")
        if given is not None and given != positional:
            raise click.UsageError(f"two goal ids given: {positional} and --goal-id {given}", ctx)
        ctx.params["goal_id"] = positional
    for p in command.params:
        if isinstance(p, GoalIdOption) and p.goal_required and ctx.params.get("goal_id") is None:
            where = "GOAL_ID or --goal-id" if any(q.name == GOAL_ARG for q in command.params) else "--goal-id"
            raise click.UsageError(f"missing the goal: give {where}", ctx)

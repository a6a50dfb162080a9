"""Hooks that shape an interaction contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopx.seam.hookspecs import hookspec, spec_names

if TYPE_CHECKING:
    from loopx.seam.hookspecs.answers import ContributedAction, ReadTx, Veto
    from loopx.model import Goal


@hookspec(firstresult=True)
def loopx_contract_veto(tx: ReadTx, goal: Goal) -> Veto | dict[str, Any] | None:
    """Veto running a goal because its state needs repair.

    Called only for goals one of the plugin's capabilities serves (those the goal enables, or a
    ``default_on`` one); a plugin that declares no capability is asked for every goal.

    ``goal`` is a :class:`loopx.model.Goal`; ``tx`` a read-only view of a read transaction taken
    before the write transaction (``tx.one``, ``tx.query``). Return ``None`` to allow, or a
    :class:`~loopx.seam.hookspecs.answers.Veto` (``Veto(reason=CODE, message=TEXT, actions=[ARGV, ...])``;
    the dict ``{"reason", "message", "actions"}`` is still accepted): the decision becomes
    ``repair`` and the actions (argv lists, or command strings split once; checked like
    contributed actions, bad ones dropped and named) become the contract's steps. The first veto
    wins. A veto that raises, takes longer than ``LOOPX_HOOK_TIMEOUT`` (2 s) or returns anything
    else fails closed: ``repair`` with reason ``plugin_failed`` naming the plugin.
    """


@hookspec
def loopx_contract_actions(tx: ReadTx, goal: Goal, run_id: str, remaining: dict[str, Any] | None
                           ) -> list[ContributedAction] | list[dict[str, Any]] | None:
    """Contribute actions and notes to a ``run`` contract.

    Called only for goals one of the plugin's capabilities serves (``Goal.capabilities``, or a
    ``default_on`` capability); an action naming a capability that does not serve the goal is
    dropped. A plugin that declares no capability is asked for every goal.

    ``remaining`` is the goal's remaining quota (a dict, ``None`` meaning unlimited). Return
    ``None`` or a list of :class:`~loopx.seam.hookspecs.answers.ContributedAction` (``argv``, ``note``,
    ``capability``, ``action``, ``workdir``), or of dicts ``{"argv": ["loopx", ...], "note": TEXT,
    "capability": NAME, "action": NAME, "workdir": PATH}`` (a ``"command"`` string is still accepted and split once;
    ``workdir``, an absolute path, becomes ``agent_channel.workdir``: where executors start the agent). Each is checked
    as argv when contributed (``loopx.values.steps.contributed``): a malformed one is dropped and
    reported with the plugin's name. The core lists each as a ``do`` step run through
    ``loopx exec``, after the goal's actions and before the record/finish steps. Asked before
    the write transaction, under the same deadline as vetoes; a hook that fails or returns the
    wrong type is named in a warning and skipped.
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only

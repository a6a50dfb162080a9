"""Hooks that shape an interaction contract."""

from loopx.hookspecs import hookspec


@hookspec(firstresult=True)
def loopx_contract_veto(tx, goal):
    """Veto running a goal because its state needs repair.

    ``goal`` is a :class:`loopx.model.Goal`; ``tx`` a read-only view of a read transaction taken
    before the write transaction (``tx.one``, ``tx.query``). Return ``None`` to allow, or a dict
    ``{"reason": CODE, "message": TEXT, "actions": [COMMAND, ...]}``: the decision becomes
    ``repair`` and the actions become the contract's CLI actions. The first veto wins. A veto
    that raises, takes longer than ``LOOPX_HOOK_TIMEOUT`` (2 s) or returns anything else fails
    closed: ``repair`` with reason ``plugin_failed`` naming the plugin.
    """


@hookspec
def loopx_contract_actions(tx, goal, run_id, remaining):
    """Contribute actions and notes to a ``run`` contract.

    ``remaining`` is the goal's remaining quota (a dict, ``None`` meaning unlimited). Return
    ``None`` or a list of dicts ``{"command": TEXT, "note": TEXT, "capability": NAME}``; each
    command must be a complete shell-quoted ``loopx`` command. The core places them after the
    claim and before the record/finish steps. Asked before the write transaction, under the same
    deadline as vetoes; a hook that fails or returns the wrong type is named in a warning and
    skipped.
    """

"""Hooks that shape an interaction contract."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_contract_veto(tx, goal):
    """Veto running a goal because its state needs repair.

    ``goal`` is a :class:`loopx.model.Goal`; ``tx`` a read transaction. Return ``None`` to
    allow, or a dict ``{"reason": CODE, "message": TEXT, "actions": [COMMAND, ...]}``: the
    decision becomes ``repair`` and the actions become the contract's CLI actions.
    """


@hookspec
def loopx_contract_actions(tx, goal, run_id, remaining):
    """Contribute actions and notes to a ``run`` contract.

    ``remaining`` is the goal's remaining quota (a dict, ``None`` meaning unlimited). Return
    ``None`` or a list of dicts ``{"command": TEXT, "note": TEXT, "capability": NAME}``; each
    command must be a complete shell-quoted ``loopx`` command. The core places them after the
    claim and before the record/finish steps.
    """

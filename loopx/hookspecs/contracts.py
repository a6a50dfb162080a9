"""Hooks that shape an interaction contract."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_contract_veto(tx, goal):
    """Veto running a goal because its state needs repair.

    ``goal`` is a :class:`loopx.model.Goal`; ``tx`` a read transaction. Return ``None`` to
    allow, or a dict ``{"reason": CODE, "message": TEXT, "actions": [ARGV, ...]}``: the
    decision becomes ``repair`` and the actions (argv lists, checked like contributed ones)
    become the contract's steps.
    """


@hookspec
def loopx_contract_actions(tx, goal, run_id, remaining):
    """Contribute actions and notes to a ``run`` contract.

    ``remaining`` is the goal's remaining quota (a dict, ``None`` meaning unlimited). Return
    ``None`` or a list of dicts ``{"argv": ["loopx", ...], "note": TEXT, "capability": NAME,
    "action": NAME}`` (a ``"command"`` string is still accepted and split once). Each is checked
    as argv when contributed (``loopx.steps.contributed``): a malformed one is dropped and
    reported with the plugin's name. The core lists each as a ``do`` step run through
    ``loopx exec``, after the goal's actions and before the record/finish steps.
    """

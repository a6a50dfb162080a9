"""What contract hooks answer, as typed values, and the read view they are handed.

A ``loopx_contract_veto`` implementation answers a :class:`Veto` (or ``None``); a
``loopx_contract_actions`` one a list of :class:`ContributedAction`. The dict forms documented
before these classes existed are still accepted, and mean the same: the core turns either into
the same checked steps (:func:`loopx.values.steps.contributed`, :func:`loopx.values.steps.veto_actions`).
This module is imported only by code that uses the classes (a plugin, or the core when a
plugin answered with one), so the turn's start-up does not pay for them otherwise.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, Union

import attrs


class ReadTx(Protocol):
    """The read-only view a contract hook is handed (``tx``): a read transaction's queries."""

    def one(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ...) -> Mapping[str, Any] | None:
        """The first row of ``sql``, or ``None``."""
        ...

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ...) -> Sequence[Mapping[str, Any]]:
        """Every row of ``sql``."""
        ...


# A string where a list belongs is kept as it is (the core's check drops it and names the plugin),
# never split into its characters.
Argv = Union[list[str], tuple[str, ...]]


def _texts(value: Sequence[Argv | str]) -> Sequence[Argv | str]:
    return value if isinstance(value, str) else tuple(a if isinstance(a, str) else tuple(a) for a in value)


@attrs.frozen
class Veto:
    """A veto of running a goal: the decision becomes ``repair``.

    ``reason``: a stable code; ``message``: one sentence for people; ``actions``: the repair's
    commands, each an argv list (or a command string, split once), checked like contributed
    actions (a bad one is dropped and named). To ask for a person instead: ``ask_user=True``
    (the decision becomes ``ask_user``) with ``user_actions``, commands a person runs.
    ``findings``: codes shown with the veto.
    """

    reason: str
    message: str = ""
    actions: Sequence[Argv | str] = attrs.field(default=(), converter=_texts)
    ask_user: bool = attrs.field(default=False, kw_only=True)
    user_actions: Sequence[str] = attrs.field(default=(), kw_only=True)
    findings: Sequence[str] = attrs.field(default=(), kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        """The dict form (``{"reason", "message", "actions"}``, and ``"decision": "ask_user"``,
        ``"user_actions"``, ``"findings"`` when given) the core reads."""
        out: dict[str, Any] = {"reason": self.reason, "message": self.message,
                               "actions": self.actions if isinstance(self.actions, str)
                               else [a if isinstance(a, str) else list(a) for a in self.actions]}
        if self.ask_user:
            out["decision"] = "ask_user"
        if self.user_actions:
            out["user_actions"] = list(self.user_actions)
        if self.findings:
            out["findings"] = list(self.findings)
        return out


def _argv(value: Argv | None) -> Argv | None:
    return value if value is None or isinstance(value, str) else tuple(value)


@attrs.frozen
class ContributedAction:
    """One action a plugin contributes to a ``run`` contract (a ``do`` step run through ``loopx exec``).

    ``argv``: the command as an argv list (or ``command``, a string split once, when there is no
    argv); ``note``: a short text for the agent; ``capability`` and ``action``: the contributing
    capability and the name of the action it declared; ``workdir``: an absolute path, where
    executors start the agent for this step.
    """

    argv: Argv | None = attrs.field(default=None, converter=_argv)
    note: str | None = None
    capability: str | None = None
    action: str | None = None
    workdir: str | None = None
    command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The dict form the core checks (:func:`loopx.values.steps.contributed`)."""
        out: dict[str, Any] = {"note": self.note, "capability": self.capability, "action": self.action,
                               "workdir": self.workdir}
        if self.argv is not None:
            out["argv"] = self.argv if isinstance(self.argv, str) else list(self.argv)
        else:
            out["command"] = self.command
        return out


def plain(answer: object) -> object:
    """``answer`` with every :class:`Veto` / :class:`ContributedAction` in it as its dict form;
    anything else as it is (the checks name what is wrong with it)."""
    if isinstance(answer, (Veto, ContributedAction)):
        return answer.to_dict()
    if isinstance(answer, list):
        return [a.to_dict() if isinstance(a, ContributedAction) else a for a in answer]
    return answer

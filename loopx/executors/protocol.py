"""What an executor provider is: the :class:`Executor` Protocol every built-in and plugin executor implements.

An executor carries out one governed turn. The core (:func:`loopx.turn.turn`) calls
``check()`` (when the provider has one) before should-run, opens the run, starts the turn's
confinement (a policy and a broker, :mod:`loopx.confine`), calls ``run_turn`` inside it, and
finishes the run itself. Confinement asks nothing of the executor: every child it starts with
:func:`loopx.process.run_command` (``loopx.api.run_command``) during ``run_turn`` runs under the
turn's policy with the broker in its environment. An executor that starts processes any other
way is not confined, so it must not.
"""

from __future__ import annotations

from typing import Protocol, TypedDict, runtime_checkable


class TurnResult(TypedDict, total=False):
    """What ``run_turn`` returns: what ``run finish`` takes (``ok`` is recorded only when the evidence supports it)."""

    outcome: str  # "ok" | "partial" | "failed"
    tokens: int
    cost: float
    handoff: str


@runtime_checkable
class Executor(Protocol):
    """One way of carrying out a turn (``shell``, ``claude-code``, ``codex``, ``command``, a plugin's)."""

    def run_turn(self, registry, contract: dict, *, agent: str) -> TurnResult:
        """Carry out the turn ``contract`` (a should-run answer with decision ``run``) allows.

        Do only the contract's ``cli_channel.steps``; start children only through
        ``run_command`` (they are confined and reach the registry through the turn's broker);
        never finish the run.
        """
        ...


@runtime_checkable
class CheckedExecutor(Executor, Protocol):
    """An executor that can say before a run is opened that it cannot work."""

    def check(self) -> None:
        """Raise a ``LoopxError`` (e.g. ``executor_unavailable``) when the provider cannot work."""
        ...

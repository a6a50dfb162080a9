"""What an executor provider is: the :class:`Executor` Protocol every built-in and plugin executor implements.

An executor carries out one governed turn. What the core does, and what it asks of the executor:

* **Start.** ``loopx turn`` calls ``check()`` (:class:`CheckedExecutor`, when the provider has
  one) before should-run, so a provider that cannot work opens no run. It then opens the run,
  starts the turn's confinement (a policy and a broker, :mod:`loopx.turn.confine`) and calls
  ``run_turn(registry, contract, agent=...)`` inside it, once per turn.
* **Step.** ``run_turn`` does only the contract's ``cli_channel.steps`` (the same commands as
  ``next_cli_actions``), in order, itself or through the agent it drives; it never finishes the
  run (the core does, recording ``ok`` only when the run's evidence supports it) and returns a
  :class:`TurnResult`.
* **Interrupt.** When the turn is asked to stop (SIGTERM, Ctrl-C, a worker stopping), the core
  calls ``interrupt()`` (:class:`InterruptibleExecutor`, when the provider has one) once, from a
  thread of its own: it must return at once, and ``run_turn`` should start no new step and return
  what it has. ``loopx.api.process.stop_requested()`` says the same to an executor without ``interrupt``.
  After the grace period (``--grace-seconds``) the core stops the process group of every child
  the turn started (TERM, then KILL) and closes the run ``interrupted``, with what ``run_turn``
  returned in its handoff. (The built-ins need no ``interrupt``: ``shell`` asks before each
  step; the agent executors run one agent process, stopped with the rest.)
* **Confinement.** Asks nothing of the executor but one rule: start children only with
  :func:`loopx.sandbox.process.run_command` (``loopx.api.process.run``). Each then runs under the turn's
  policy (Landlock: it writes only beneath the workdir and its own temporary directory) with the
  broker in its environment, so any ``loopx`` command it runs reaches the registry as this run's
  executor. A child started any other way is not confined and not stopped on interruption, so
  an executor must not. Where the machine cannot confine, the turn is refused
  (``confinement_unavailable``) before ``run_turn`` is called, unless the user chose
  ``--unconfined``.
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
        start no new step once a stop is asked for; never finish the run.
        """
        ...


@runtime_checkable
class CheckedExecutor(Executor, Protocol):
    """An executor that can say before a run is opened that it cannot work."""

    def check(self) -> None:
        """Raise a ``LoopxError`` (e.g. ``executor_unavailable``) when the provider cannot work."""
        ...


@runtime_checkable
class InterruptibleExecutor(Executor, Protocol):
    """An executor the core can ask to stop its turn early."""

    def interrupt(self) -> None:
        """The turn is asked to stop: start no new step, let the agent wrap up, return from ``run_turn``.

        Called once per stop, from another thread than ``run_turn``'s, while ``run_turn`` runs;
        return at once (set a flag, signal the agent). Children still running when the grace
        period ends are stopped by the core.
        """
        ...

"""``loopx.api.executors``: the protocols an executor implements."""

from __future__ import annotations

from loopx.turn.executors.protocol import CheckedExecutor, Executor, InterruptibleExecutor

__all__ = ["CheckedExecutor", "Executor", "InterruptibleExecutor"]

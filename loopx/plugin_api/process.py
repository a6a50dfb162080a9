"""``loopx.api.process``: running a child process, confined or not, and asking whether to stop."""

from __future__ import annotations

from loopx.sandbox.interrupt import requested as stop_requested
from loopx.turn.private_run import private_dir, run_confined
from loopx.sandbox.process import caller_dir, in_step, run_command as run

__all__ = ["caller_dir", "in_step", "private_dir", "run", "run_confined", "stop_requested"]

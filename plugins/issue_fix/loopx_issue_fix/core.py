"""Every LoopX core name Issue-Fix uses, imported in this one place.

The plugin API (``loopx.api``) is being introduced while this plugin changes; keeping the core
imports here means moving to it touches one file. Modules here are imported lazily by the
plugin's commands, never by ``plugin.py`` (which ``quota should-run`` loads every turn).
"""

from __future__ import annotations

from loopx import capabilities, clock, gates, runs, todos  # noqa: F401
from loopx.errors import LoopxError  # noqa: F401
from loopx.project_prompt import load_goal  # noqa: F401
from loopx.usage import remaining, usage  # noqa: F401
from loopx.validate import check_id, check_text, new_id  # noqa: F401


def run_command(argv: list[str], *, env: dict[str, str], timeout: float, cwd: str | None = None) -> dict:
    """The core's one way of running a child: its own process group, killed whole on time-out."""
    try:
        from loopx.process import run_command as run
    except ImportError:  # before the agents work moves it out of loopx.executors
        from loopx.executors import run_command as run
    return run(argv, env=env, timeout=timeout, cwd=cwd)

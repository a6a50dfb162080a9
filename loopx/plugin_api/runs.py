"""``loopx.api.runs``: turns (runs) of a goal: opening one, checking one, its actions and rewards."""

from __future__ import annotations

from loopx.domain.actions import add as add_action, add_in as add_action_in
from loopx.domain.rewards import add as add_reward
from loopx.domain.runs import check_fresh, check_recordable, load_run as load
from loopx.model.run import Run
from loopx.views.should_run import default_agent, should_run

__all__ = ["Run", "add_action", "add_action_in", "add_reward", "check_fresh", "check_recordable", "default_agent",
           "load", "should_run"]

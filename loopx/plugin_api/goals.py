"""``loopx.api.goals``: reading a goal, its ledger and usage; creating and closing goals."""

from __future__ import annotations

from loopx.domain.damage import replay, snapshot
from loopx.domain.goals import close_in, create, create_in, criterion_in, history, list_goals as list, load_goal as load
from loopx.domain.goals import set_capabilities, show
from loopx.ledger.log import events, iter_events as event_stream, iter_rows as event_rows
from loopx.model.goal import Goal
from loopx.views.status import overview
from loopx.domain.usage import remaining, usage

__all__ = ["Goal", "close_in", "create", "create_in", "criterion_in", "event_rows", "event_stream", "events", "history",
           "list", "load", "overview", "remaining", "replay", "set_capabilities", "show", "snapshot", "usage"]

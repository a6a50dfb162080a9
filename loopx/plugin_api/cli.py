"""``loopx.api.cli``: a plugin's commands, their options and output, as the core's commands have them."""

from __future__ import annotations

from loopx.cli.ids import goal_option, id_option
from loopx.cli.output import LoopxCommand, LoopxGroup, actor, emit, fail, operation_option, registry_url
from loopx.cli.output import set_output_format, wants_json
from loopx.values.progress import progress
from loopx.ledger.registry import current_actor

__all__ = ["LoopxCommand", "LoopxGroup", "actor", "current_actor", "emit", "fail", "goal_option", "id_option",
           "operation_option", "progress", "registry_url", "set_output_format", "wants_json"]

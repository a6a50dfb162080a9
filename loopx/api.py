"""The LoopX plugin API: the one module a plugin imports (besides ``loopx.hookimpl``).

Everything a plugin needs is here, documented section by section in ``docs/plugins.md``:
opening the registry, reading a goal and its todos, gates, evidence and runs, the domain
operations (each its own transaction, or composed inside one mutation), capability state,
extending the vocabulary (event kinds, error codes), command output helpers, errors, running a
child process, and the checks and fixtures for a plugin's own tests. Every other module of the
core may change without notice.

It is a table of names and nothing else: each name is one function or value of the module
that holds it (``_LAZY``), so the API and the CLI run the same rules. The module is cheap to
import: names resolve lazily on first use (PEP 562), so a plugin module that imports
``loopx.api`` at the top adds nothing measurable to ``quota should-run``.
"""

from __future__ import annotations

from typing import Any

from loopx import hookimpl

# Every name, as "module:attribute" resolved on first access, under the heading of
# docs/plugins.md that documents it (tests/test_api_rules.py checks each is documented there).
GROUPS = {
    "Errors": {
        "LoopxError": "loopx.errors:LoopxError",
    },
    "The registry": {
        "open_registry": "loopx.cli.output:open_registry",
        "registry_url": "loopx.cli.output:registry_url",
        "Registry": "loopx.registry:Registry",
        "current_actor": "loopx.registry:current_actor",
        "now": "loopx.clock:now",
    },
    "Reading a goal": {
        "load_goal": "loopx.goals:load_goal",
        "list_goals": "loopx.goals:list_goals",
        "show_goal": "loopx.goals:show",
        "goal_history": "loopx.goals:history",
        "list_todos": "loopx.todos:list_todos",
        "load_todo": "loopx.todos:load_todo",
        "ready_todos": "loopx.todos:ready",
        "list_gates": "loopx.gates:list_gates",
        "load_gate": "loopx.gates:load_gate",
        "list_evidence": "loopx.evidence:of_goal",
        "load_evidence": "loopx.evidence:load_evidence",
        "list_evidence_for": "loopx.evidence:list_for",
        "load_run": "loopx.runs:load_run",
        "check_fresh": "loopx.runs:check_fresh",
        "check_recordable": "loopx.runs:check_recordable",
        "goal_events": "loopx.ledger:events",
        "goal_event_stream": "loopx.ledger:iter_events",
        "goal_event_rows": "loopx.ledger:iter_rows",
        "goal_usage": "loopx.usage:usage",
        "remaining_quota": "loopx.usage:remaining",
        "to_json": "loopx.model:to_json",
    },
    "Domain operations (one transaction each)": {
        "create_goal": "loopx.goals:create",
        "set_goal_capabilities": "loopx.goals:set_capabilities",
        "add_todo": "loopx.todos:add",
        "settle_todo": "loopx.todos:settle",
        "request_gate": "loopx.gates:add",
        "add_action": "loopx.actions:add",
        "add_evidence": "loopx.evidence:record",
        "should_run": "loopx.should_run:should_run",
        "default_agent": "loopx.should_run:default_agent",
        "decide_gate": "loopx.gates:decide",
        "add_reward": "loopx.rewards:add",
        "status_overview": "loopx.status:overview",
    },
    "Domain operations inside one mutation": {
        "writer_create_goal": "loopx.goals:create_in",
        "writer_add_todo": "loopx.todos:add_in",
        "writer_request_gate": "loopx.gates:request_in",
        "writer_add_action": "loopx.actions:add_in",
        "writer_add_evidence": "loopx.evidence:record_in",
        "writer_todo_done": "loopx.todos:done_in",
        "writer_todo_reopen": "loopx.todos:reopen_in",
        "writer_todo_block": "loopx.todos:block_in",
        "writer_criterion_met": "loopx.goals:criterion_in",
        "writer_close_goal": "loopx.goals:close_in",
    },
    "Capabilities and their state": {
        "Capability": "loopx.capabilities:Capability",
        "Veto": "loopx.hookspecs.answers:Veto",
        "ContributedAction": "loopx.hookspecs.answers:ContributedAction",
        "get_capability": "loopx.capabilities:get",
        "acting": "loopx.capabilities:acting",
        "put_state": "loopx.capabilities:put_state",
        "drop_state": "loopx.capabilities:drop_state",
        "apply_state": "loopx.events.capability:set_rows",
        "todo_changed": "loopx.todo_ready:changed",
        "set_state": "loopx.capabilities:set_state",
        "delete_state": "loopx.capabilities:delete_state",
        "get_state": "loopx.capabilities:get_state",
    },
    "Pages a capability serves": {
        "announce_page": "loopx.served_pages:announce",
        "withdraw_page": "loopx.served_pages:withdraw",
        "registry_id": "loopx.served_pages:registry_id",
        "dashboard_stylesheet": "loopx.served_pages:dashboard_stylesheet",
    },
    "The repair API: what is damaged, and repairing it": {
        "find_damage": "loopx.damage:check",
        "goal_damage": "loopx.damage:goal",
        "cheap_damage": "loopx.damage:cheap",
        "unreadable_damage": "loopx.damage:unreadable",
        "schema_damage": "loopx.damage:registry_schema",
        "storage_damage": "loopx.damage:registry_storage",
        "damage_goal_ids": "loopx.damage:goal_ids",
        "Finding": "loopx.damage:Finding",
        "DAMAGE_CODES": "loopx.damage:CODES",
        "goal_snapshot": "loopx.damage:snapshot",
        "replay_goal": "loopx.damage:replay",
        "repair_drift": "loopx.repairs:drift",
        "GOAL_TABLES": "loopx.store.schema:GOAL_TABLES",
        "SCHEMA_VERSION": "loopx.store.schema:CURRENT_VERSION",
        "verify_chain": "loopx.integrity:verify_chain",
        "INTEGRITY_CODES": "loopx.integrity:CODES",
        "verify_anchor": "loopx.integrity:verify_anchor",
        "chain_head": "loopx.integrity:head",
        "chain_acknowledged": "loopx.integrity:acknowledged",
        "goal_rows": "loopx.ledger:snapshot",
        "propose_repair": "loopx.repairs:propose",
        "Repair": "loopx.repairs:Repair",
        "REPAIR_KINDS": "loopx.events.repair:REPAIRS",
        "apply_repair": "loopx.repairs:apply",
        "abandon_expired_run": "loopx.repairs:abandon_expired_run",
        "rebuild_goal": "loopx.repairs:rebuild",
        "record_loss": "loopx.repairs:record_loss",
        "escape_goal_data": "loopx.repairs:escape",
        "escape_event_bodies": "loopx.repairs:escape_event_bodies",
        "restore_goal_rows": "loopx.repairs:restore_goal_rows",
        "backup_registry": "loopx.backup:backup",
        "reindex_storage": "loopx.repairs:reindex_storage",
        "rechain_goal": "loopx.integrity:rechain",
        "seal_goal": "loopx.integrity:seal",
        "Writer": "loopx.registry:Writer",
        "repair_event_apply": "loopx.events.repair:apply_event",
        "repair_event_guard": "loopx.repairs:guard_event",
        "json_problem": "loopx.jsonsafe:problem",
        "json_escaped": "loopx.jsonsafe:escaped",
    },
    "Ids and validation": {
        "new_id": "loopx.validate:new_id",
        "check_id": "loopx.validate:check_id",
        "check_text": "loopx.validate:check_text",
        "check_name": "loopx.validate:check_name",
    },
    "Commands and output": {
        "LoopxCommand": "loopx.cli.output:LoopxCommand",
        "LoopxGroup": "loopx.cli.output:LoopxGroup",
        "emit": "loopx.cli.output:emit",
        "fail": "loopx.cli.output:fail",
        "wants_json": "loopx.cli.output:wants_json",
        "set_output_format": "loopx.cli.output:set_output_format",
        "operation_option": "loopx.cli.output:operation_option",
        "actor": "loopx.cli.output:actor",
        "goal_option": "loopx.cli.ids:goal_option",
        "id_option": "loopx.cli.ids:id_option",
        "progress": "loopx.progress:progress",
    },
    "Running a child process": {
        "run_command": "loopx.process:run_command",
        "in_step": "loopx.process:in_step",
        "caller_dir": "loopx.process:caller_dir",
        "private_dir": "loopx.private_run:private_dir",
        "run_confined": "loopx.private_run:run_confined",
    },
    "Files a step names, and what a human reviews": {
        "open_step_file": "loopx.safe_open:open_file",
        "read_step_file": "loopx.safe_open:read_file",
        "hash_step_file": "loopx.safe_open:hash_file",
        "write_step_file": "loopx.safe_open:write_file",
        "write_beneath": "loopx.safe_open:write_beneath",
        "read_beneath": "loopx.safe_open:read_beneath",
        "save_artifact": "loopx.artifacts:save",
        "read_artifact": "loopx.artifacts:read_verified",
        "goal_artifacts": "loopx.artifacts:of_goal",
        "artifact_dir": "loopx.artifacts:directory",
    },
    "Executors": {
        "Executor": "loopx.executors.protocol:Executor",
        "CheckedExecutor": "loopx.executors.protocol:CheckedExecutor",
        "InterruptibleExecutor": "loopx.executors.protocol:InterruptibleExecutor",
        "stop_requested": "loopx.interrupt:requested",
    },
    "Testing": {
        "CliResult": "loopx.testing:CliResult",
        "capability_doc_problems": "loopx.testing:capability_doc_problems",
        "check_plugin_imports": "loopx.testing:check_plugin_imports",
        "ALLOWED_IMPORTS": "loopx.testing:ALLOWED_IMPORTS",
    },
}

_LAZY = {name: target for names in GROUPS.values() for name, target in names.items()}

#: Names defined in this module itself.
_OWN = ("hookimpl",)

__all__ = sorted([*_LAZY, *_OWN])


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'loopx.api' has no attribute {name!r}")
    import importlib

    module, attr = target.split(":")
    if name == "LoopxError":
        importlib.import_module("loopx.plugins")  # so that plugin-registered codes are known
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return __all__

"""Errors as values: every refusal LoopX makes has a stable code.

Humans see one line on stderr; under ``--format json`` the same error is printed as
``{"error": {"code": ..., "message": ...}}``. Every LoopxError exits with status 2 and is
raised before anything is written (a write transaction that raises is rolled back).
"""

from __future__ import annotations

#: The stable codes, each with what it means (docs/errors.md is generated from this table:
#: ``python scripts/error_codes_doc.py --write``). Tests and harnesses match on these strings;
#: never rename or remove one.
CODES: dict[str, str] = {
    # -- bad input, and who may do what
    "invalid_argument": "a value given on the command line (or through MCP) is not one LoopX accepts; usage errors too",
    "not_found": "a thing named by path or name (a distribution, a plugin, a file, a backup) does not exist",
    "id_ambiguous": "an id prefix matches more than one id (the message lists them)",
    "invalid_actor": "LOOPX_ACTOR names an actor a process may not claim to be",
    "actor_forbidden": "the acting actor (user, executor, dashboard, capability) may not make this change",
    "ownership_violation": "a capability wrote or repaired what it did not declare as its own",
    "operation_conflict": "an --operation-id was used before for a different request",
    # -- goals, todos, gates, actions
    "goal_not_found": "no goal has this id",
    "goal_closed": "the goal is closed: it takes no more changes of this kind",
    "goal_not_open": "the goal is paused or otherwise not open for this change",
    "todo_not_found": "the goal has no todo with this id",
    "todo_claimed": "another agent holds the todo's claim until its lease expires",
    "todo_not_ready": "the todo waits for todos it depends on, or for a gate",
    "todo_not_open": "the todo is not open (done or dropped already, or open already when reopened)",
    "lease_lost": "the caller's claim on a todo was lost (expired and taken over at a later epoch)",
    "dependency_cycle": "a dependency would make todos wait for each other in a cycle",
    "gate_not_found": "the goal has no gate with this id",
    "gate_decided": "the gate was decided already",
    "gate_pending": "a pending gate holds the change back until a user decides it",
    "action_not_found": "the goal has no action with this name",
    "action_exists": "reserved: an action of this name exists (nothing raises it; see RESERVED)",
    "action_not_allowed": "the run's contract does not allow this action",
    "capability_not_found": "no installed capability has this name",
    "capability_conflict": "two capabilities have one name, or own one namespace (disable one)",
    # -- runs and turns
    "contract_stale": "the goal's gates, lifecycle, limits or actions changed since the run's contract: ask should-run again",
    "run_not_found": "no run has this id (or it belongs to another goal)",
    "run_not_open": "the run is finished, abandoned or expired, or a command needs a run and got none",
    "run_not_yours": "the run belongs to another agent, or a step acts on a run other than its own",
    "run_in_progress": "another live process carries this run out",
    "step_already_started": "a step runs once per run, and this one started already",
    "step_failed": "a step the change depends on did not run, or did not succeed, in this run",
    "outcome_contradicts_evidence": "a run cannot finish ok while its recorded evidence says otherwise",
    "executor_unavailable": "the executor's program is not installed or not on PATH",
    "agent_logged_out": "an agent CLI that is installed but not logged in: refused before should-run",
    "confinement_unavailable": "a step cannot be confined here and the user did not opt out",
    "broker_unavailable": "a confined step's loopx cannot reach its turn's broker",
    "worker_not_found": "loopx worker stop: no such worker, or not exactly one running",
    # -- the registry and its storage
    "registry_unavailable": "the registry cannot be opened or reached (a missing directory, a server down, a lock)",
    "registry_readonly": "the registry (or this transaction) is read-only",
    "registry_not_found": "no registry exists at this location (reading never creates one)",
    "registry_invalid": "the file or database is not a LoopX registry",
    "registry_corrupt": "the registry file is damaged: restore a backup",
    "registry_newer": "the registry's schema is newer than this LoopX: upgrade LoopX",
    "schema_too_new": "reserved: the former name of registry_newer (see RESERVED)",
    "target_not_empty": "the target registry of a copy or the demo already holds goals",
    "copy_mismatch": "a registry copy does not match its source",
    "disk_full": "no space left to write (nothing was changed)",
    "evidence_too_large": "an evidence payload exceeds this registry's cap",
    "state_too_large": "a goal's plugin state would exceed this registry's cap",
    "repair_not_needed": "a repair was asked for damage the goal does not show",
    # -- integrity
    "integrity_key_missing": "the integrity key that sealed the ledger is not available here",
    "integrity_mismatch": "the ledger's seals do not match its content (or were stripped)",
    "artifact_tampered": "what a human reviews is not what LoopX recorded",
    # -- a step's limits (loopx.sandbox.limits; recorded as evidence on the run)
    "step_memory_limit": "a step's command hit its memory limit",
    "step_process_limit": "a step's command hit its process count limit",
    "step_cpu_limit": "a step's command hit its CPU time limit",
    # -- workspaces (loopx.domain.workspace)
    "workspace_missing": "the goal has no workspace yet (its next turn makes one)",
    "workspace_unavailable": "the goal's workspace cannot be made (for example a project with nothing to copy)",
    "workspace_conflict": "loopx workspace apply: the diff does not apply to the checkout as it is",
    "workspace_empty": "loopx workspace apply: nothing to apply",
    "workspace_git_failed": "a git call LoopX made for a workspace failed",
    # -- plugins
    "plugin_error": "a plugin failed to install, load or answer",
}

#: Codes nothing in this tree raises any more, and why each is kept (tests/test_errors_table.py
#: checks that every other code is raised somewhere).
RESERVED: dict[str, str] = {
    "schema_too_new": "renamed registry_newer; kept so that code matching the old name still loads",
    "action_exists": "adding an action of a name the goal has replaces it, so nothing raises it; kept because codes are never removed",
    "step_memory_limit": "a reason in a step's result and evidence (loopx.sandbox.limits.REASONS), not raised: the step fails",
    "step_process_limit": "a reason in a step's result and evidence (loopx.sandbox.limits.REASONS), not raised: the step fails",
    "step_cpu_limit": "a reason in a step's result and evidence (loopx.sandbox.limits.REASONS), not raised: the step fails",
}


#: Codes plugins registered (``loopx_register_error_codes``): ``{code: description}``, filled in
#: on first use of a namespaced code by the loader the plugin layer installs.
PLUGIN_CODES: dict[str, str] = {}
_loaders: list = []


def add_code_loader(loader) -> None:
    """Install ``loader()``, which fills :data:`PLUGIN_CODES` (the plugin layer does this)."""
    _loaders.append(loader)


def known(code: str) -> bool:
    """Whether ``code`` is a core code or one a plugin registered."""
    if code in CODES or code in PLUGIN_CODES:
        return True
    if "." in code:
        for loader in _loaders:
            loader()
    return code in PLUGIN_CODES


class LoopxError(Exception):
    """A refusal with a stable ``code`` and a one-line human ``message``."""

    exit_code = 2

    def __init__(self, code: str, message: str, **details):
        if not known(code):
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def to_json(self) -> dict:
        """The ``{"error": {...}}`` document printed under ``--format json``."""
        err = {"code": self.code, "message": self.message}
        if self.details:
            err["details"] = self.details
        return {"error": err}

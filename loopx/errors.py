"""Errors as values: every refusal LoopX makes has a stable code.

Humans see one line on stderr; under ``--format json`` the same error is printed as
``{"error": {"code": ..., "message": ...}}``. Every LoopxError exits with status 2 and is
raised before anything is written (a write transaction that raises is rolled back).
"""

from __future__ import annotations

# The stable codes. Tests and harnesses match on these strings; never rename one.
CODES = frozenset(
    {
        "invalid_argument",
        "goal_not_found",
        "goal_closed",
        "goal_not_open",
        "gate_not_found",
        "gate_decided",
        "gate_pending",
        "todo_not_found",
        "todo_claimed",
        "todo_not_ready",
        "todo_not_open",
        "lease_lost",
        "dependency_cycle",
        "run_not_found",
        "run_not_open",
        "action_not_found",
        "action_exists",
        "action_not_allowed",
        "contract_stale",
        "actor_forbidden",
        "ownership_violation",
        "repair_not_needed",
        "operation_conflict",
        "registry_unavailable",
        "registry_readonly",
        "registry_not_found",
        "registry_invalid",
        "registry_corrupt",
        "registry_newer",
        "schema_too_new",  # no longer raised (now registry_newer); kept so matching code still loads
        "plugin_error",
        "capability_not_found",
        "capability_conflict",
        "not_found",
        "id_ambiguous",
        "target_not_empty",
        "copy_mismatch",
        "invalid_actor",
        "run_not_yours",
        "outcome_contradicts_evidence",
        "step_failed",
        "executor_unavailable",
        "agent_logged_out",  # an agent CLI that is installed but not logged in: refused before should-run
        "confinement_unavailable",  # a step cannot be confined here and the user did not opt out
        "broker_unavailable",  # a confined step's loopx cannot reach its turn's broker
        "disk_full",
        "integrity_key_missing",
        "integrity_mismatch",
        "step_already_started",  # loopx.claims: a step runs once per run
        "run_in_progress",  # loopx.claims: another live process carries this run out
        "evidence_too_large",
        "state_too_large",
        "artifact_tampered",  # loopx.artifacts: what a human reviews is not what LoopX recorded
        "worker_not_found",  # loopx worker stop: no such worker, or not one alone running
        "step_memory_limit",  # loopx.limits: a step's command hit its memory limit (recorded as evidence)
        "step_process_limit",  # ... its process count limit
        "step_cpu_limit",  # ... its CPU time limit
        "workspace_missing",  # loopx.workspace: the goal has no workspace (its next turn makes one)
        "workspace_unavailable",  # loopx.workspace: the goal's workspace cannot be made (no commit...)
        "workspace_conflict",  # loopx workspace apply: the diff does not apply to the checkout as it is
        "workspace_empty",  # loopx workspace apply: nothing to apply
        "workspace_git_failed",  # loopx.gitcmd: a git call LoopX made failed
    }
)


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

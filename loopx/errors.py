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
        "target_not_empty",
        "copy_mismatch",
        "issue_fix_error",
        "not_reproduced",
        "repair_failed",
    }
)


class LoopxError(Exception):
    """A refusal with a stable ``code`` and a one-line human ``message``."""

    exit_code = 2

    def __init__(self, code: str, message: str, **details):
        if code not in CODES:
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

"""Actor roles: who may cause an event (``capability:NAME`` has the role ``capability``)."""

from __future__ import annotations

USER, EXECUTOR, CAPABILITY, CORE = "user", "executor", "capability", "core"


def role(actor: str) -> str:
    """The role of an actor string (``capability:issue_fix`` -> ``capability``)."""
    return actor.split(":", 1)[0]

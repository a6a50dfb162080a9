"""One finding of a damage detector (:mod:`loopx.domain.damage`)."""

from __future__ import annotations

DAMAGE, HOUSEKEEPING = "damage", "housekeeping"


class Finding:
    """One problem a detector found: ``code`` (:data:`loopx.domain.damage.CODES`), the goal and the row it is about
    (``subject``), a one-line ``message``, the ``repair`` that cures it (a kind of
    :data:`loopx.domain.repairs.KINDS`, ``run_abandoned``, ``migrated``, ``reindexed``, or ``None``: only a
    person or a backup can), its ``severity`` (:data:`DAMAGE` or :data:`HOUSEKEEPING`) and ``details``.

    A plain class, not an attrs one: a contract veto imports this module before every turn.
    """

    __slots__ = ("code", "goal_id", "subject", "message", "repair", "severity", "details")

    def __init__(self, code: str, goal_id: str | None, subject: str | None, message: str, repair: str | None,
                 severity: str = DAMAGE, details: dict | None = None):
        self.code, self.goal_id, self.subject, self.message = code, goal_id, subject, message
        self.repair, self.severity, self.details = repair, severity, details or {}

    def to_json(self) -> dict:
        """JSON-ready finding."""
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return f"Finding({self.code!r}, {self.goal_id!r}, {self.subject!r})"

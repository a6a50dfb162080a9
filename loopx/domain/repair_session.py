"""The repair API as one object: what a repair capability reads (damage) and writes (repairs).

A repair capability builds one :class:`RepairSession` for itself (``RepairSession("self_repair",
kind="self_repair.repaired")``) and reaches every detector and repair through it; the session
carries the capability's actor (``capability:NAME``) and its repair event kind, so no call
repeats them. It is the only name of the repair API in :mod:`loopx.api`: the reading half is
:mod:`loopx.domain.damage`, the writing half :mod:`loopx.domain.repairs`, and both may change without notice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from loopx.domain import damage
from loopx.ledger.events import repair as repair_events
from loopx.store.schema import CURRENT_VERSION

if TYPE_CHECKING:
    from loopx.domain import repairs
    from loopx.ledger.registry import Registry
    from loopx.ledger.writer import Writer
    from loopx.seam.hookspecs.answers import ReadTx


def guard_event(writer: Writer, body: dict[str, Any]) -> None:
    """The ``guard`` of a capability's repair event kind: :func:`loopx.domain.repairs.guard_event`.

    The writing half of the repair API loads when a repair is written, not when its event kind is
    registered: the register hooks run on every command, ``quota should-run`` included."""
    from loopx.domain import repairs

    repairs.guard_event(writer, body)


class _Repair:
    """``RepairSession.Repair``: :class:`loopx.domain.repairs.Repair`, imported on first read (see
    :func:`guard_event` for why)."""

    def __get__(self, instance: object, owner: type | None = None) -> type[repairs.Repair]:
        from loopx.domain import repairs

        return repairs.Repair


@attrs.frozen(repr=False)  # written below: attrs' generated one is compiled when the class is made
class RepairSession:
    """The repair API for one capability: ``capability`` (its name, which must declare
    ``repairs=``) and ``kind`` (its repair event kind, ``NAME.repaired``, registered with
    :attr:`apply_event` and :attr:`guard_event`)."""

    capability: str
    kind: str

    #: One problem a detector found (``code``, ``goal_id``, ``subject``, ``message``, ``repair``,
    #: ``severity``, ``details``; ``to_json()``).
    Finding: ClassVar[type[damage.Finding]] = damage.Finding
    #: One proposed repair (``kind``, ``goal_id``, ``finding``, ``subject``, ``body``; ``to_json()``).
    if TYPE_CHECKING:
        Repair: ClassVar[type[repairs.Repair]]
    else:
        Repair = _Repair()
    #: Every detector code, with what it means.
    CODES: ClassVar[dict[str, str]] = damage.CODES
    #: The registry schema version this LoopX writes (what ``schema_behind`` compares with).
    SCHEMA_VERSION: ClassVar[int] = CURRENT_VERSION
    #: The apply and guard of a capability's repair event kind (``loopx_register_event_kinds``):
    #: plain functions, so the core replays these events even when the capability is gone.
    apply_event = staticmethod(repair_events.apply_event)
    guard_event = staticmethod(guard_event)

    def __repr__(self) -> str:
        return f"RepairSession(capability={self.capability!r}, kind={self.kind!r})"

    @property
    def actor(self) -> str:
        """The actor its repairs are written as: ``capability:NAME``."""
        return f"capability:{self.capability}"

    # --- what is damaged (none of these writes) ---------------------------------------------------

    def check(self, reg: Registry, *, goal_id: str | None = None, now: str | None = None,
              also: Callable[..., list[Any]] | None = None, codes: dict[str, str] | None = None) -> dict[str, Any]:
        """Every detector, on one goal or all: ``{"ok", "findings", "checked"}``. ``also(tx,
        goal_id)`` adds the capability's own findings per goal (``codes``: their codes)."""
        return damage.check(reg, goal_id=goal_id, now=now, also=also, codes=codes or ())

    def goal(self, tx: ReadTx, goal_id: str, *, now: str | None = None, full: bool = True) -> list[damage.Finding]:
        """Every finding for one goal; ``full=False`` leaves out the chain walk and the ledger replay."""
        return damage.goal(tx, goal_id, now=now, full=full)

    def cheap(self, tx: ReadTx, goal_id: str) -> list[damage.Finding]:
        """The detectors cheap enough for a contract veto (a few indexed queries, no replay)."""
        return damage.cheap(tx, goal_id)

    def unreadable(self, tx: ReadTx, goal_id: str) -> list[damage.Finding]:
        """Events of the goal holding NaN/Infinity or lone surrogates (cured by :meth:`escape`)."""
        return damage.unreadable(tx, goal_id)

    def drift(self, tx: ReadTx, goal_id: str) -> list[damage.Finding]:
        """What calls for a :meth:`rebuild`: chain findings, ledger gaps, state that disagrees with
        the ledger replayed (replays the ledger)."""
        from loopx.domain import repairs

        return repairs.drift(tx, goal_id)

    def schema(self, reg: Registry) -> list[damage.Finding]:
        """``schema_behind`` when the registry's schema is older than this LoopX."""
        return damage.registry_schema(reg)

    def storage(self, reg: Registry) -> list[damage.Finding]:
        """``storage_integrity`` when the storage engine reports corruption."""
        return damage.registry_storage(reg)

    def goal_ids(self, tx: ReadTx, goal_id: str | None = None) -> list[str]:
        """``[goal_id]`` (``goal_not_found`` if absent) or every goal, oldest first."""
        return damage.goal_ids(tx, goal_id)

    def propose(self, finding: damage.Finding) -> repairs.Repair | None:
        """The repair of one finding, or ``None`` when only a person (or a backup) can cure it."""
        from loopx.domain import repairs

        return repairs.propose(finding)

    # --- repairing (inside ``reg.mutate(session.actor, ...)`` unless said otherwise) ---------------

    def apply(self, w: Writer, repair: repairs.Repair) -> int:
        """Record one proposed repair on the writer's goal; returns the event's number."""
        from loopx.domain import repairs

        return repairs.apply(w, repair, kind=self.kind)

    def rebuild(self, w: Writer) -> dict[str, Any] | None:
        """``state_rebuilt``: the writer's goal rebuilt from its ledger (drift detected again inside
        the transaction), keeping human control and recording loss; ``None``: nothing to rebuild.
        ``{"findings", "kept", "kept_keys", "lost", "seq"}``."""
        from loopx.domain import repairs

        return repairs.rebuild(w, kind=self.kind)

    def escape(self, w: Writer) -> dict[str, Any] | None:
        """``data_escaped``: unreadable event bodies rewritten escaped, the originals kept as evidence;
        ``None`` when there were none, else ``{"findings", "evidence_id", "seq"}``."""
        from loopx.domain import repairs

        return repairs.escape(w, kind=self.kind)

    def abandon_expired_run(self, w: Writer, run_id: str) -> None:
        """Ask the core to mark an open run past its expiry abandoned (refused unless it is)."""
        from loopx.domain import repairs

        repairs.abandon_expired_run(w, run_id)

    def restore_goal_rows(self, reg: Registry, *, after: Callable[[Writer, dict[str, Any]], Any] | None = None) -> list[Any]:
        """Goals whose row is gone while their ledger survives, each rebuilt in its own transaction
        as this capability; ``after(w, rebuilt)`` runs in it and its results are returned."""
        from loopx.domain import repairs

        return repairs.restore_goal_rows(reg, self.actor, kind=self.kind, after=after)

    def backup(self, reg: Registry) -> str | None:
        """Copy an SQLite registry to ``FILE.bak-TIME`` before repairing (``None`` on PostgreSQL)."""
        from loopx.domain.backup import backup

        return backup(reg)

    def reindex(self, reg: Registry) -> None:
        """Rebuild the registry's indexes and put LoopX's triggers back (cures ``storage_integrity``
        and ``schema_altered``); its own transaction."""
        from loopx.domain import repairs

        repairs.reindex_storage(reg)

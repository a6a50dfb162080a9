"""What a mutation sees: :class:`Writer` (the transaction, the actor, the locked goal, ``emit``).

:meth:`loopx.ledger.registry.Registry.mutate` makes one per write transaction; it lives here, beside the
registry, so that the registry's module holds the write's stages and this one what a write emits.
"""

from __future__ import annotations

from loopx.values import clock
from loopx.ledger import integrity, log as ledger
from loopx.values.errors import LoopxError
from loopx.model import Event


class Writer:
    """What a mutation sees: the transaction, the actor, the locked goal, and ``emit``.

    The actor is fixed when the writer is created: ``actor`` is read-only, so no code running
    inside a mutation can make the ledger record another actor. A capability's own writes
    inside someone else's mutation go through :meth:`as_capability`, which can only narrow the
    actor to ``capability:NAME``, never widen it to ``user`` or ``core``.
    """

    def __init__(self, tx, actor: str, goal: dict | None, operation_id: str | None):
        self.tx = tx
        self._actor = actor
        self.goal = goal
        self.goal_id = goal["id"] if goal else None
        self.operation_id = operation_id
        self.at = clock.now()
        self.events: list[Event] = []
        self._revision: int | None = None if goal else 0
        self._prev_hash: str | None = None
        #: What :func:`loopx.ledger.integrity.verify_head` found before this mutation (goal writes only).
        self.integrity_problems: list = []
        #: Set by a repair that rebuilt the goal's state from its ledger: the result is trusted.
        self.rebuilt = False

    @property
    def actor(self) -> str:
        """Who this writer writes as (fixed at creation)."""
        return self._actor

    def as_capability(self, name: str) -> "Writer":
        """A writer on the same transaction that records ``capability:NAME`` as its actor.

        Lets a plugin command that acts for the user (creating a goal, say) record its own
        state in the same transaction. Only ever a capability actor: there is no way to get a
        ``user`` or ``core`` writer from here.
        """
        from loopx.seam.capabilities import check_acting

        return _CapabilityWriter(self, f"capability:{check_acting(name)}")

    def emit(self, kind_name: str, body: dict, *, goal_id: str | None = None) -> Event:
        """Append and apply one event to this writer's goal (``goal_id`` only when creating)."""
        return self._emit(self._actor, kind_name, body, goal_id=goal_id)

    def _emit(self, actor: str, kind_name: str, body: dict, *, goal_id: str | None = None) -> Event:
        kind = ledger.kind(kind_name)
        if not kind.writers:
            raise LoopxError("actor_forbidden", f"{kind_name} is a former name of an event kind, kept for replay;"
                                                " nobody writes it any more")
        if ledger.role(actor) not in kind.writers:
            raise LoopxError(
                "actor_forbidden",
                f"{actor} may not {kind_name.replace('.', ' ')}: that is for {', '.join(sorted(kind.writers))}",
            )
        if kind.guard is not None:
            kind.guard(self if actor == self._actor else _CapabilityWriter(self, actor), body)
        if goal_id is not None:
            if self.goal_id is not None and goal_id != self.goal_id:
                raise ValueError("one mutation writes one goal's ledger")
            self.goal_id = goal_id
        if self.goal_id is None:
            raise ValueError("emit needs a goal")
        if self._revision is None:
            # Number from the ledger itself, not from goals.revision: if that column were ever
            # damaged, trusting it would collide with an existing (goal_id, seq). And never below
            # the recorded chain head: events lost at the end leave a visible gap, never a reused
            # number.
            # What the integrity check just read in this transaction, when it did (one statement).
            seen = integrity.head_seen(self.tx, self.goal_id)
            if seen is not None:
                last, sealed = seen
                sealed_seq = sealed["seq"] if sealed else None
            else:
                last, sealed_seq = integrity.last_and_head_seq(self.tx, self.goal_id)
            self._revision = max((last["seq"] if last else 0), sealed_seq or 0)
            self._prev_hash = (last["hash"] if last else None) or integrity.GENESIS
        self._revision += 1
        event = Event(
            id=0,
            goal_id=self.goal_id,
            seq=self._revision,
            at=self.at,
            actor=actor,
            kind=kind_name,
            body=body,
            operation_id=self.operation_id,
        )
        getattr(self.tx, "__dict__", {}).pop("_loopx_page", None)  # a page read before this event is stale after it
        event, self._prev_hash = ledger.append_chained(self.tx, event, self._prev_hash)
        if kind_name.split(".", 1)[0] not in ledger.AREAS:
            # A plugin's own kind may set state in its apply (loopx.api.state.apply_rows): held to the
            # goal's cap in this transaction, so a refusal rolls the whole write back.
            from loopx.ledger import caps

            caps.check_state(self.tx, self.goal_id)
        self.events.append(event)
        return event

    @property
    def revision(self) -> int:
        """The goal's revision after what this writer emitted."""
        return self._revision if self._revision is not None else self.goal["revision"]


class _CapabilityWriter:
    """A view of a :class:`Writer` that writes as one capability (see :meth:`Writer.as_capability`)."""

    __slots__ = ("_parent", "_actor")

    def __init__(self, parent: Writer, actor: str):
        object.__setattr__(self, "_parent", parent)
        object.__setattr__(self, "_actor", actor)

    @property
    def actor(self) -> str:
        return self._actor

    def __getattr__(self, name):
        return getattr(self._parent, name)

    def __setattr__(self, name, value):
        raise AttributeError(f"a capability writer is read-only ({name})")

    def as_capability(self, name: str):
        return self._parent.as_capability(name)

    def emit(self, kind_name: str, body: dict, *, goal_id: str | None = None) -> Event:
        return self._parent._emit(self._actor, kind_name, body, goal_id=goal_id)

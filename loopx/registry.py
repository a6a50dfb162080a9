"""The registry: the one API over durable state.

Every write goes through :meth:`Registry.mutate`, which

* names the actor (``user``, ``executor``, ``capability:NAME``; the dashboard never writes),
* runs in one store transaction with the goal's row held against other writers,
* appends each change as an event and applies it through :func:`loopx.ledger.apply`,
* refuses an event kind the actor's role may not write (``actor_forbidden``), and
* makes ``operation_id`` retries return the first result without writing anything.

Domain modules (``project_prompt``, ``gates``, ``todos``, ``runs``...) build on it: they
validate, read what they need through the writer's ``tx``, and ``emit`` events.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from typing import Any, Callable

from loopx import clock, ledger
from loopx.errors import LoopxError
from loopx.model import Event

ENV_REGISTRY = "LOOPX_REGISTRY"
ENV_ACTOR = "LOOPX_ACTOR"


ENV_RUN_ID = "LOOPX_RUN_ID"
# What LOOPX_ACTOR may name. "core" is LoopX itself and never comes from the environment.
_ENV_ROLES = ("user", "executor", "dashboard")


def current_actor() -> str:
    """The actor this process acts as: ``LOOPX_ACTOR`` (set by ``loopx exec``), else ``user``.

    An empty or unknown ``LOOPX_ACTOR`` is refused (``invalid_actor``) rather than read as
    ``user``. A process started inside a governed step (``LOOPX_RUN_ID`` is in its environment)
    acts as the executor whatever ``LOOPX_ACTOR`` says, so a step cannot approve a gate by
    prefixing ``LOOPX_ACTOR=user`` to a command.
    """
    raw = os.environ.get(ENV_ACTOR)
    actor = "user" if raw is None else raw
    if actor not in _ENV_ROLES and not (actor.startswith("capability:") and len(actor) > len("capability:")):
        shown = "empty" if actor == "" else repr(actor[:60])
        raise LoopxError("invalid_actor", f"LOOPX_ACTOR is {shown}; use user, executor, dashboard or capability:NAME "
                                          "(unset means user)")
    if ENV_RUN_ID in os.environ and actor != "dashboard":
        return "executor"
    return actor


def inside_run() -> str | None:
    """The run this process was started inside (``LOOPX_RUN_ID``), or ``None``."""
    return os.environ.get(ENV_RUN_ID)


def check_actor(actor: str) -> str:
    """Refuse actor strings that name no known role."""
    if actor in ("user", "executor", "dashboard", "core"):
        return actor
    if isinstance(actor, str) and actor.startswith("capability:") and len(actor) > len("capability:"):
        return actor
    raise LoopxError("invalid_actor", f"unknown actor {actor!r}")


def resolve_url(url: str | None) -> str:
    """The registry URL to use: explicit, else ``LOOPX_REGISTRY``, else the default file."""
    url = url or os.environ.get(ENV_REGISTRY)
    if url:
        return url
    from loopx.store.sqlite import default_path

    return str(default_path())


def display_url(url: str) -> str:
    """``url`` as safe to print: any password replaced by ``***``."""
    from loopx.store import display_url as safe

    return safe(url)


def open_store(url: str | None = None, *, readonly: bool = False, create: bool = True):
    """Open the store for ``url`` through the backend registered for its scheme.

    With ``create=False`` (what the CLI uses) a registry file that does not exist is not made
    now: reads are refused with ``registry_not_found`` and the first write creates it, saying
    where on stderr, so a mistyped ``--registry`` on a read command never leaves a file behind.
    """
    from loopx import plugins

    url = resolve_url(url)
    scheme = url.split("://", 1)[0].lower() if "://" in url else "sqlite"
    if scheme.startswith("sqlite"):
        scheme = "sqlite"
    factory = plugins.store_factories().get(scheme)
    if factory is None:
        hint = " (pip install 'loopx[postgres]')" if scheme.startswith("postgres") else ""
        raise LoopxError("registry_unavailable", f"no storage backend for {scheme}://{hint}")
    if scheme == "sqlite" and not create:
        from loopx.store.sqlite import path_from_url

        path = path_from_url(url)
        if str(path) != ":memory:" and not path.exists():
            if readonly:
                raise LoopxError("registry_not_found", _not_found(path))
            return MissingStore(url, path, factory)
    return factory(url, readonly)


def _not_found(path) -> str:
    return (f"no registry at {path} (check --registry / LOOPX_REGISTRY; creating a goal with"
            " `loopx project_prompt create` makes one)")


class MissingStore:
    """A registry file that does not exist yet: reads are refused, the first write creates it."""

    dialect = "sqlite"
    readonly = False

    def __init__(self, url: str, path, factory):
        self.url, self.path, self._factory, self._store = url, path, factory, None

    @property
    def missing(self) -> bool:
        """True until the first write created the file."""
        return self._store is None

    def write(self, work):
        if self._store is None:
            import sys

            self._store = self._factory(self.url, False)
            print(f"loopx: created a new registry at {self.path}", file=sys.stderr)
        return self._store.write(work)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __getattr__(self, name):
        store = self.__dict__.get("_store")
        if store is not None:
            return getattr(store, name)
        if name.startswith("__"):
            raise AttributeError(name)
        raise LoopxError("registry_not_found", _not_found(self.__dict__.get("path")))


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
        #: What :func:`loopx.integrity.verify_head` found before this mutation (goal writes only).
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
        from loopx.capabilities import check_acting

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
            from loopx import integrity

            last = integrity.last_event(self.tx, self.goal_id)
            sealed = integrity.head(self.tx, self.goal_id)
            self._revision = max((last["seq"] if last else 0), (sealed["seq"] if sealed else 0))
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
        event, self._prev_hash = ledger.append_chained(self.tx, event, self._prev_hash)
        if kind_name.split(".", 1)[0] not in ledger.AREAS:
            # A plugin's own kind may set state in its apply (loopx.api.apply_state): held to the
            # goal's cap in this transaction, so a refusal rolls the whole write back.
            from loopx import caps

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


class Registry:
    """Durable state, over one store."""

    def __init__(self, store):
        self.store = store

    @classmethod
    def open(cls, url: str | None = None, *, readonly: bool = False, create: bool = True) -> "Registry":
        """Open the registry at ``url`` (see :func:`resolve_url`; ``create``: :func:`open_store`)."""
        return cls(open_store(url, readonly=readonly, create=create))

    def close(self) -> None:
        """Release the store."""
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextmanager
    def read(self):
        """A consistent snapshot: ``with reg.read() as tx: ...``."""
        with self.store.read() as tx:
            yield tx

    def mutate(
        self,
        actor: str,
        work: Callable[[Writer], Any],
        *,
        goal_id: str | None = None,
        operation_id: str | None = None,
        request: dict | None = None,
        allow_closed: bool = False,
    ) -> Any:
        """Run ``work(writer)`` as one transaction and return its (JSON-ready) result.

        ``goal_id`` names the goal to lock (``goal_not_found`` if it does not exist, and
        ``goal_closed`` if it is closed unless ``allow_closed``). With ``operation_id``, a
        retry whose ``request`` matches returns the first result and writes nothing; a reuse
        of the id for a different request is refused with ``operation_conflict``.
        """
        check_actor(actor)
        if actor == "dashboard":
            raise LoopxError("actor_forbidden", "the dashboard never writes")
        if operation_id is not None:
            from loopx.validate import check_text

            operation_id = check_text(operation_id, what="--operation-id", limit="agent")
        request_hash = _hash(request or {}) if operation_id is not None else None
        if goal_id is not None and getattr(self.store, "missing", False):
            # Only creating a goal may create a registry; anything about an existing goal is a
            # mistyped path.
            raise LoopxError("registry_not_found", _not_found(self.store.path))
        if actor.startswith("capability:"):
            # Capability declarations are plugin answers: read them before the lock is taken
            # (the ownership guards below use the cached result).
            from loopx import capabilities

            capabilities.load()
            # A plugin writes only as a capability it registered (not as another plugin's).
            capabilities.check_acting(actor.split(":", 1)[1])

        def transaction(tx):
            if operation_id is not None:
                done = tx.one("SELECT request, result FROM operations WHERE id = ?", (operation_id,))
                if done is not None:
                    if done["request"] != request_hash:
                        raise LoopxError(
                            "operation_conflict",
                            f"--operation-id {operation_id} was already used for a different request",
                        )
                    return json.loads(done["result"]), []
            goal = None
            if goal_id is not None:
                goal = tx.lock_goal(goal_id)
                if goal is None:
                    raise LoopxError("goal_not_found", f"no goal {goal_id}")
                if goal["status"] == "closed" and not allow_closed:
                    raise LoopxError("goal_closed", f"goal {goal_id} is closed")
            writer = Writer(tx, actor, goal, operation_id)
            if goal is not None:
                from loopx import integrity

                # Checked before the change: a write must never seal state that was altered
                # outside the ledger (that would launder the tampering).
                writer.integrity_problems = integrity.verify_head(tx, goal_id)
            result = work(writer)
            if writer.events:
                from loopx import integrity

                integrity.seal(tx, writer.goal_id, trusted=not writer.integrity_problems or writer.rebuilt)
            if operation_id is not None:
                tx.execute(
                    "INSERT INTO operations (id, goal_id, actor, request, result, at) VALUES (?, ?, ?, ?, ?, ?)",
                    (operation_id, writer.goal_id, actor, request_hash, json.dumps(result), writer.at),
                )
            return result, writer.events

        result, events = self.store.write(transaction)
        if events:
            from loopx import plugins

            plugins.notify_committed(self, events)
        return result


def _hash(request: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()

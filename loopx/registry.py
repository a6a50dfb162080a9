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

import contextvars
import json
import os
from contextlib import contextmanager
from typing import Any, Callable

# Every write uses these (light, no loopx imports of their own): imported once, not per call.
from loopx import clock, integrity, keys, ledger, step_journal
from loopx.errors import LoopxError
from loopx.model import Event

ENV_REGISTRY = "LOOPX_REGISTRY"
ENV_ACTOR = "LOOPX_ACTOR"


ENV_RUN_ID = "LOOPX_RUN_ID"
# What LOOPX_ACTOR may name: only a downgrade. "user" is whoever runs loopx without a broker and
# outside a step; "capability:NAME" exists only inside LoopX's process (the plugin API); "core"
# is LoopX itself. None of them is ever taken from the environment.
_ENV_ROLES = ("executor", "dashboard")

#: The identity of the step a broker serves in this context (:mod:`loopx.broker`): a dict with
#: ``run_id``, ``goal_id``, ``agent``, ``step_id``; ``None`` outside a broker. Set only by LoopX
#: in its own process, never from anything a step says.
IDENTITY: contextvars.ContextVar = contextvars.ContextVar("loopx_identity", default=None)


def current_actor() -> str:
    """The actor this process acts as: ``executor`` inside a step, else ``user``.

    Inside a step means: a broker is serving this command (:data:`IDENTITY`), or ``LOOPX_RUN_ID``
    is in the environment. ``LOOPX_ACTOR`` may only downgrade (``executor``, or ``dashboard`` for
    a read-only view); ``user`` and ``capability:NAME`` are refused with ``invalid_actor``: the
    user is whoever runs ``loopx`` outside a step, and a capability acts only through the plugin
    API inside LoopX's process.
    """
    if IDENTITY.get() is not None:
        return "executor"
    raw = os.environ.get(ENV_ACTOR)
    if raw is not None and raw not in _ENV_ROLES:
        shown = "empty" if raw == "" else repr(raw[:60])
        raise LoopxError("invalid_actor", f"LOOPX_ACTOR is {shown}; it may only be executor or dashboard "
                                          "(unset, loopx acts as you; user and capability:NAME never come "
                                          "from the environment)")
    actor = "user" if raw is None else raw
    if ENV_RUN_ID in os.environ and actor != "dashboard":
        return "executor"
    return actor


def _plugin_asking() -> bool:
    from loopx import plugins

    return plugins.calling_plugins(2) is not None


def inside_run() -> str | None:
    """The run this process acts inside (a broker's run, else ``LOOPX_RUN_ID``), or ``None``."""
    ident = IDENTITY.get()
    if ident is not None:
        return ident["run_id"]
    if _RAW is not None:  # every write asks: os.environ's own mapping, without encoding the name
        found = _RAW.get(b"LOOPX_RUN_ID")
        return None if found is None else os.fsdecode(found)
    return os.environ.get(ENV_RUN_ID)


#: os.environ's own bytes mapping on POSIX (what ``os.environ[...] = ...`` changes), else None.
_RAW = getattr(os.environ, "_data", None) if os.name == "posix" and os.environ.encodekey("A") == b"A" else None


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
        hint = " (pip install 'psycopg[binary]>=3.2')" if scheme.startswith("postgres") else ""
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
            " `loopx project-prompt create` makes one)")


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

    def __init__(self, store, *, owner: bool = True):
        self.store = store
        self._owner = owner  # False: a loan of another Registry's store (see lend), closed by its owner

    @classmethod
    def open(cls, url: str | None = None, *, readonly: bool = False, create: bool = True) -> "Registry":
        """Open the registry at ``url`` (see :func:`resolve_url`; ``create``: :func:`open_store`)."""
        return cls(open_store(url, readonly=readonly, create=create))

    def close(self) -> None:
        """Release the store (a loan, :meth:`lend`, leaves it to its owner)."""
        if self._owner:
            self.store.close()

    def lend(self) -> "Registry":
        """This registry over the same open store, for code whose ``close()`` (its ``with``) must
        leave the store open: a step run by hand lends its registry to the command it runs."""
        return Registry(self.store, owner=False)

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
        goal_of: Callable[[Any], str] | None = None,
        preview: bool = False,
    ) -> Any:
        """Run ``work(writer)`` as one transaction and return its (JSON-ready) result.

        ``goal_id`` names the goal to lock (``goal_not_found`` if it does not exist, and
        ``goal_closed`` if it is closed unless ``allow_closed``). With ``operation_id``, a
        retry whose ``request`` matches returns the first result and writes nothing; a reuse
        of the id for a different request is refused with ``operation_conflict``.
        ``goal_of(tx)`` instead of ``goal_id``: finds the goal (say, a run's) in the write
        transaction itself, before the lock, raising what it refuses (a ``"goal"`` in ``request``
        is then the goal found).
        ``preview``: run the same checks and ``work`` in the same transaction, then roll it back:
        nothing is written (no step-journal replay before it, no operation record, no anchor
        move, no hooks after it); returns what ``work`` returned (``should-run --dry-run``).
        """
        check_actor(actor)
        if actor == "dashboard":
            raise LoopxError("actor_forbidden", "the dashboard never writes")
        if inside_run() is not None and (actor == "user" or (actor == "core" and _plugin_asking())):
            # Whatever runs for a step (a plugin's command, through the plugin API too) acts as
            # that step's executor or as a capability, never as the user or as LoopX itself.
            raise LoopxError("actor_forbidden", f"a command run inside a step may not write as {actor}")
        if goal_of is not None and (self.store.dialect != "sqlite" or getattr(self.store, "missing", False)):
            # On SQLite the write holds the whole database from its first statement, so finding the
            # goal inside it costs no read transaction of its own. PostgreSQL's repeatable-read
            # snapshot would be fixed by that read, before the goal's row lock: found first, apart.
            with self.read() as tx:
                goal_id, goal_of = goal_of(tx), None
            if request is not None and "goal" in request:
                request = {**request, "goal": goal_id}
        if operation_id is not None:
            from loopx.validate import check_text

            operation_id = check_text(operation_id, what="--operation-id", limit="agent")
        request_hash = _hash(request or {}) if operation_id is not None else None
        if not preview and not getattr(self.store, "missing", False) and step_journal.pending(self.store):
            # A step ran but its result could not be recorded (full disk, killed process):
            # record it now, before anything else is written (loopx/step_journal.py).
            step_journal.replay(self)
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

        anchor_to: dict = {}
        locked: dict = {}  # the goal row as locked: which capabilities hear the committed events

        def transaction(tx):
            nonlocal goal_id, request_hash
            anchor_to.clear()
            if goal_of is not None:
                goal_id = goal_of(tx)
                if request_hash is not None and "goal" in request:
                    # The request names the goal found, as it did when it was found beforehand.
                    request_hash = _hash({**request, "goal": goal_id})
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
                locked["goal"] = goal
                if goal["status"] == "closed" and not allow_closed:
                    raise LoopxError("goal_closed", f"goal {goal_id} is closed")
            # Read after the goal's lock (on PostgreSQL the first statement fixes the snapshot).
            ring = keys.keyring(tx)
            if ring.state == "missing":
                # Without the key nothing written could be verified later: refuse before anything.
                raise LoopxError("integrity_key_missing", ring.missing_message())
            writer = Writer(tx, actor, goal, operation_id)
            if goal is not None:
                # Checked before the change: a write must never seal state that was altered
                # outside the ledger (that would launder the tampering).
                writer.integrity_problems = integrity.verify_head(tx, goal_id, rollback=True)
            result = work(writer)
            if preview:
                raise _Previewed(result)  # rolls the transaction back: nothing it did is kept
            if writer.events:
                sealed = integrity.seal(tx, writer.goal_id, trusted=not writer.integrity_problems or writer.rebuilt,
                                        last={"seq": writer.events[-1].seq, "hash": writer._prev_hash},
                                        whole=writer.rebuilt)
                # A goal found rolled back keeps its anchor where it was: writing on the older copy
                # must not make it look current (``loopx registry reanchor`` accepts it).
                if sealed and ring.state == "keyed" and not any(p.code == "registry_rolled_back"
                                                     for p in writer.integrity_problems):
                    anchor_to.update(registry_id=ring.registry_id, goal_id=writer.goal_id, seq=sealed["seq"],
                                     head_hash=sealed["hash"], event_id=max(e.id for e in writer.events))
            if operation_id is not None:
                tx.execute(
                    "INSERT INTO operations (id, goal_id, actor, request, result, at) VALUES (?, ?, ?, ?, ?, ?)",
                    (operation_id, writer.goal_id, actor, request_hash, json.dumps(result), writer.at),
                )
            return result, writer.events

        def advance(in_queue=False):
            if anchor_to:
                return _advance_anchor(anchor_to, getattr(self.store, "path", None)
                                       if self.store.dialect == "sqlite" else None, in_queue=in_queue)
            return None

        if preview:
            try:
                self.store.write(transaction)
            except _Previewed as done:
                return done.result
            raise AssertionError("a preview's transaction must roll back")  # pragma: no cover
        if getattr(type(self.store), "THEN_IN_QUEUE", False):
            # Moved while this writer still holds the writers' queue: the next one finds the anchor
            # where the registry is, and anchor writes never queue on a lock of their own.
            # The anchor's own automatic checkpoint would run in the queue: off, where the store's
            # writers checkpoint it with the registry after leaving the queue.
            in_queue = getattr(self.store, "checkpoints_by_ticket", lambda: False)()
            result, events = self.store.write(transaction, then=lambda: advance(in_queue=in_queue))
        else:
            result, events = self.store.write(transaction)
            advance()
        if events:
            from loopx import plugins

            hooks = plugins.hooks()
            if hooks.implemented(hooks.event_committed):
                from loopx.capability_goals import skipped_for_events

                try:
                    skip = skipped_for_events(locked.get("goal"), events)
                except LoopxError:  # declarations that do not load (reported by every other command):
                    skip = frozenset()  # the commit stands, and observing it never raises
                hooks.event_committed(self, events, skip=skip)
        return result


class _Previewed(Exception):
    """Raised out of a preview's transaction (:meth:`Registry.mutate`) so the store rolls it back;
    carries what the work returned."""

    def __init__(self, result):
        super().__init__("preview")
        self.result = result


#: ``(registry path as opened, registry id)`` this process has remembered (resolving the path
#: is most of what remembering costs once done: not redone on every write).
_REMEMBERED: set = set()


def _advance_anchor(to: dict, path=None, in_queue: bool = False) -> str | None:
    """Move the rollback anchor (:mod:`loopx.anchor`) after a commit, and (an SQLite file, once
    per process) remember that the registry at ``path`` is keyed, so that a copy found there
    without its id is never trusted (a file moved since it was keyed is covered from its first
    write at the new place). The write has happened: a failure here only leaves the anchor
    behind, which is accepted, so it is said, not raised. Returns the anchor file's path (None if
    it could not be written); ``in_queue``: see :func:`loopx.anchor.record`."""
    import sqlite3

    from loopx import anchor, keys

    try:
        if path is not None and (str(path), to["registry_id"]) not in _REMEMBERED:
            keys.remember_location(keys.sqlite_location(path), to["registry_id"], once=True)
            _REMEMBERED.add((str(path), to["registry_id"]))
        return anchor.record(to["registry_id"], to["goal_id"], to["seq"], to["head_hash"], to["event_id"],
                             in_queue=in_queue)
    except (OSError, sqlite3.Error) as exc:
        import sys

        print(f"loopx: warning: could not update the rollback anchor {anchor.path(to['registry_id'])}: {exc}",
              file=sys.stderr)
        return None


def _hash(request: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()

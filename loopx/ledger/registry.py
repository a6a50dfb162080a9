"""The registry: the one API over durable state.

Every write goes through :meth:`Registry.mutate`, which

* names the actor (``user``, ``executor``, ``capability:NAME``; the dashboard never writes),
* runs in one store transaction with the goal's row held against other writers,
* appends each change as an event and applies it through :func:`loopx.ledger.log.apply`,
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
from loopx.ledger import integrity, keys, step_journal
from loopx.values.errors import LoopxError
from loopx.model import Event
from loopx.store.queries import ledger as queries
from loopx.ledger.writer import Writer  # (loopx.ledger.registry.Writer, as before)

ENV_REGISTRY = "LOOPX_REGISTRY"
ENV_ACTOR = "LOOPX_ACTOR"


ENV_RUN_ID = "LOOPX_RUN_ID"
# What LOOPX_ACTOR may name: only a downgrade. "user" is whoever runs loopx without a broker and
# outside a step; "capability:NAME" exists only inside LoopX's process (the plugin API); "core"
# is LoopX itself. None of them is ever taken from the environment.
_ENV_ROLES = ("executor", "dashboard")

#: The identity of the step a broker serves in this context (:mod:`loopx.turn.broker`): a dict with
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
    from loopx.seam import plugins

    return plugins.calling_plugins(2) is not None


def inside_run() -> str | None:
    """The run this process acts inside (a broker's run, else ``LOOPX_RUN_ID``), or ``None``."""
    ident = IDENTITY.get()
    if ident is not None:
        return ident["run_id"]
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
    from loopx.seam import plugins

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
            from loopx.store.missing import MissingStore, not_found

            if readonly:
                raise LoopxError("registry_not_found", not_found(path))
            return MissingStore(url, path, factory)
    return factory(url, readonly)


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

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
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
        _check_writer(actor)
        if goal_of is not None and (not self.store.holds_all_on_write or self.store.missing):
            # On SQLite the write holds the whole database from its first statement, so finding the
            # goal inside it costs no read transaction of its own. PostgreSQL's repeatable-read
            # snapshot would be fixed by that read, before the goal's row lock: found first, apart.
            with self.read() as tx:
                goal_id, goal_of = goal_of(tx), None
            if request is not None and "goal" in request:
                request = {**request, "goal": goal_id}
        if operation_id is not None:
            from loopx.values.validate import check_text

            operation_id = check_text(operation_id, what="--operation-id", limit="agent")
        mutation = _Mutation(self, actor, work, goal_id=goal_id, operation_id=operation_id, request=request,
                             allow_closed=allow_closed, goal_of=goal_of, preview=preview)
        self._before_write(actor, goal_id, preview)
        if preview:
            try:
                self.store.write(mutation.transaction)
            except _Previewed as done:
                return done.result
            raise AssertionError("a preview's transaction must roll back")  # pragma: no cover
        # The anchor moves while this writer still holds the writers' queue (SQLite): the next one
        # finds it where the registry is, and anchor writes never queue on a lock of their own.
        result, events = self.store.write(mutation.transaction, then=mutation.advance_anchor)
        if events:
            _notify_committed(self, mutation.locked_goal, events)
        return result

    def _before_write(self, actor: str, goal_id: str | None, preview: bool) -> None:
        """What must happen before the write transaction: a step's unrecorded result recorded, a
        missing registry refused unless the write creates a goal, a capability's declarations
        loaded (they are plugin answers: read before the lock is taken)."""
        store = self.store
        if not preview and not store.missing and step_journal.pending(store):
            # A step ran but its result could not be recorded (full disk, killed process):
            # record it now, before anything else is written (loopx/ledger/step_journal.py).
            step_journal.replay(self)
        if goal_id is not None and store.missing:
            # Only creating a goal may create a registry; anything about an existing goal is a
            # mistyped path.
            from loopx.store.missing import not_found

            raise LoopxError("registry_not_found", not_found(store.path))
        if actor.startswith("capability:"):
            from loopx.seam import capabilities

            capabilities.load()  # the ownership guards use the cached result
            # A plugin writes only as a capability it registered (not as another plugin's).
            capabilities.check_acting(actor.split(":", 1)[1])


def _check_writer(actor: str) -> None:
    """Refuse an actor that may not write here: an unknown role, the dashboard, or ``user``/``core``
    asked for by whatever runs inside a step."""
    check_actor(actor)
    if actor == "dashboard":
        raise LoopxError("actor_forbidden", "the dashboard never writes")
    if inside_run() is not None and (actor == "user" or (actor == "core" and _plugin_asking())):
        # Whatever runs for a step (a plugin's command, through the plugin API too) acts as
        # that step's executor or as a capability, never as the user or as LoopX itself.
        raise LoopxError("actor_forbidden", f"a command run inside a step may not write as {actor}")


class _Mutation:
    """One :meth:`Registry.mutate`: its write transaction in named stages (the store may run
    :meth:`transaction` again after a conflict), then the anchor's move after the commit."""

    def __init__(self, reg: "Registry", actor: str, work: Callable[[Writer], Any], *, goal_id: str | None,
                 operation_id: str | None, request: dict | None, allow_closed: bool,
                 goal_of: Callable[[Any], str] | None, preview: bool):
        self.reg, self.actor, self.work = reg, actor, work
        self.goal_id, self.goal_of, self.allow_closed, self.preview = goal_id, goal_of, allow_closed, preview
        self.operation_id, self.request = operation_id, request
        self.request_hash = _hash(request or {}) if operation_id is not None else None
        self.anchor_to: dict = {}  # where the rollback anchor moves once committed (empty: it stays)
        self.locked_goal: dict | None = None  # the goal row as locked: which capabilities hear the events

    def transaction(self, tx) -> tuple[Any, list[Event]]:
        """The write transaction: ``(result, events)``."""
        self.anchor_to = {}
        if self.goal_of is not None:
            self._find_goal(tx)
        done = self._done_before(tx)
        if done is not None:
            return done, []
        goal = self._lock_goal(tx)
        # Read after the goal's lock (on PostgreSQL the first statement fixes the snapshot).
        ring = keys.keyring(tx)
        if ring.state == "missing":
            # Without the key nothing written could be verified later: refuse before anything.
            raise LoopxError("integrity_key_missing", ring.missing_message())
        writer = Writer(tx, self.actor, goal, self.operation_id)
        if goal is not None:
            # Checked before the change: a write must never seal state that was altered
            # outside the ledger (that would launder the tampering).
            writer.integrity_problems = integrity.verify_head(tx, self.goal_id, rollback=True)
        result = self.work(writer)
        if self.preview:
            raise _Previewed(result)  # rolls the transaction back: nothing it did is kept
        if writer.events:
            self._seal(tx, writer, ring)
        if self.operation_id is not None:
            queries.record_operation(tx, (self.operation_id, writer.goal_id, self.actor, self.request_hash,
                                          json.dumps(result), writer.at))
        return result, writer.events

    def _find_goal(self, tx) -> None:
        """The goal ``goal_of`` finds, in the write transaction itself (SQLite)."""
        self.goal_id = self.goal_of(tx)
        if self.request_hash is not None and "goal" in self.request:
            # The request names the goal found, as it did when it was found beforehand.
            self.request_hash = _hash({**self.request, "goal": self.goal_id})

    def _done_before(self, tx):
        """The first result of this ``operation_id`` (a retry writes nothing), or None;
        ``operation_conflict`` when the id was used for a different request."""
        if self.operation_id is None:
            return None
        done = queries.operation(tx, self.operation_id)
        if done is None:
            return None
        if done["request"] != self.request_hash:
            raise LoopxError("operation_conflict",
                             f"--operation-id {self.operation_id} was already used for a different request")
        return json.loads(done["result"])

    def _lock_goal(self, tx) -> dict | None:
        """The goal's row, held against other writers (``goal_not_found``, ``goal_closed``)."""
        self.locked_goal = None
        if self.goal_id is None:
            return None
        goal = tx.lock_goal(self.goal_id)
        if goal is None:
            raise LoopxError("goal_not_found", f"no goal {self.goal_id}")
        self.locked_goal = goal
        if goal["status"] == "closed" and not self.allow_closed:
            raise LoopxError("goal_closed", f"goal {self.goal_id} is closed")
        return goal

    def _seal(self, tx, writer: Writer, ring) -> None:
        """Seal the goal's new head, and note where the rollback anchor moves after the commit."""
        sealed = integrity.seal(tx, writer.goal_id, trusted=not writer.integrity_problems or writer.rebuilt,
                                last={"seq": writer.events[-1].seq, "hash": writer._prev_hash},
                                whole=writer.rebuilt)
        # A goal found rolled back keeps its anchor where it was: writing on the older copy
        # must not make it look current (``loopx registry reanchor`` accepts it).
        if sealed and ring.state == "keyed" and not any(p.code == "registry_rolled_back"
                                                        for p in writer.integrity_problems):
            self.anchor_to = dict(registry_id=ring.registry_id, goal_id=writer.goal_id, seq=sealed["seq"],
                                  head_hash=sealed["hash"], event_id=max(e.id for e in writer.events))

    def advance_anchor(self) -> str | None:
        """Move the rollback anchor after the commit (the store's ``then``); the anchor's own
        automatic checkpoint is off where the store's writers checkpoint it with the registry."""
        if not self.anchor_to:
            return None
        store = self.reg.store
        return _advance_anchor(self.anchor_to, store.path, in_queue=store.checkpoints_by_ticket())


def _notify_committed(reg: "Registry", goal: dict | None, events: list[Event]) -> None:
    """Tell the plugins that hear it what was committed (after the commit: never rolls it back)."""
    from loopx.seam import plugins

    hooks = plugins.hooks()
    if hooks.implemented(hooks.event_committed):
        from loopx.seam.capability_goals import skipped_for_events

        try:
            skip = skipped_for_events(goal, events)
        except LoopxError:  # declarations that do not load (reported by every other command):
            skip = frozenset()  # the commit stands, and observing it never raises
        hooks.event_committed(reg, events, skip=skip)


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
    """Move the rollback anchor (:mod:`loopx.ledger.anchor`) after a commit, and (an SQLite file, once
    per process) remember that the registry at ``path`` is keyed, so that a copy found there
    without its id is never trusted (a file moved since it was keyed is covered from its first
    write at the new place). The write has happened: a failure here only leaves the anchor
    behind, which is accepted, so it is said, not raised. Returns the anchor file's path (None if
    it could not be written); ``in_queue``: see :func:`loopx.ledger.anchor.record`."""
    import sqlite3

    from loopx.ledger import anchor, keys

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

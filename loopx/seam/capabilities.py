"""Capabilities: what a plugin declares about itself, and the core's enforcement of it.

A capability is a plugin that owns state. It declares itself through the
``loopx_register_capabilities(register)`` hook with a :class:`Capability`: its name, version,
summary, the state namespaces it owns and the state it reads, its quota needs per run, the
commands and contract actions it adds, the core repairs it may record, and its document under
``docs/capabilities/``. The core holds it to that declaration:

* two capabilities owning one namespace (or one owning a namespace inside another's) is a load
  error naming both (``capability_conflict``);
* a capability writes ``capability_state`` rows only in namespaces it owns; anything else is
  refused with ``ownership_violation`` before anything is written (the check is a guard on the
  ``capability.*`` event kinds, so it holds however the event is emitted);
* a capability whose quota needs exceed what remains is not offered in a contract
  (:func:`offerable`, :func:`filter_actions`);
* a capability serves only the goals that enable it (``goals.capabilities``, set by a user at
  creation or with ``loopx project-prompt capabilities``): its plugin's contract actions, vetoes
  and ``loopx_event_committed`` observers are not called for other goals (:mod:`loopx.seam.capability_goals`),
  unless it declares itself on for every goal (``default_on=True`` with a ``why`` its document
  repeats: self-repair's integrity veto).

The core itself declares no capability; only plugins do.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Self, Sequence, Union

import attrs

# The declaration checks live in loopx.seam.capability_checks; these names stay importable from here.
from loopx.seam.capability_checks import NAME_RE as _NAME_RE, NAMESPACE_RE as _NAMESPACE_RE
from loopx.seam.capability_checks import QUOTA_KEYS, check_conflicts, validate  # noqa: F401
from loopx.values.errors import LoopxError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from loopx.ledger.writer import Writer

# State keys: short machine names.
_KEY_RE = r"[a-z][a-z0-9_.-]{0,63}"
#: Largest JSON encoding of one state value (bigger material belongs in evidence files).
MAX_VALUE_BYTES = 64 * 1024
#: Most keys one state write may set.
MAX_KEYS_PER_WRITE = 100

# The declarations are attrs classes without converters or a generated __repr__: ``quota
# should-run`` loads them (to filter capability actions) before every agent turn, and each
# converter, like a generated __repr__, is code attrs compiles when the class is created. The
# declaration's loose forms (a list or one name for a tuple, a dict for QuotaNeeds) are normalised
# once, in __attrs_post_init__.


class _Declared:
    __slots__ = ()

    def __repr__(self) -> str:
        inner = ", ".join(f"{a.name}={getattr(self, a.name)!r}" for a in attrs.fields(type(self)))
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (the declaration itself never changes)."""
        return attrs.evolve(self, **changes)


@attrs.frozen(repr=False)
class QuotaNeeds(_Declared):
    """What one run of a capability's work needs from the goal's remaining quota (0 = nothing)."""

    turns: int = 0
    tokens: int = 0
    wall_seconds: float = 0.0

    def to_json(self) -> dict[str, float]:
        """``{"turns", "tokens", "wall_seconds"}``."""
        return {k: getattr(self, k) for k in QUOTA_KEYS}


def _quota(value: object) -> QuotaNeeds:
    if isinstance(value, QuotaNeeds):
        return value
    if value is None:
        return QuotaNeeds()
    if isinstance(value, dict):
        unknown = set(value) - set(QUOTA_KEYS)
        if unknown:
            raise LoopxError("plugin_error", f"unknown quota need(s) {sorted(unknown)}; use {', '.join(QUOTA_KEYS)}")
        return QuotaNeeds(**value)
    raise LoopxError("plugin_error", f"quota needs must be a dict or QuotaNeeds, not {type(value).__name__}")


def _names(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value or ())  # type: ignore[call-overload]


_LISTS = ("owns", "reads", "commands", "actions", "repairs", "user_commands")
#: One name, or several.
Names = Union[str, Sequence[str]]


@attrs.frozen(repr=False)
class Capability(_Declared):
    """One capability's declaration (see the module docstring and ``docs/capabilities/README.md``).

    ``owns``: state namespaces it alone writes. ``reads``: state it reads (core areas such as
    ``todos`` or other capabilities' namespaces). ``quota``: its needs per run, a
    :class:`QuotaNeeds` or a dict of ``turns``/``tokens``/``wall_seconds``. ``commands``: the
    top-level ``loopx`` commands it adds. ``user_commands``: those of them only a user runs
    (``"issue-fix start"``, or a command's name alone for all of it): inside a turn the broker
    refuses them before anything runs, like the core's user-only commands. ``actions``: names of the contract actions it
    contributes (a contributed action carries ``"capability": NAME`` and ``"action": one of
    these``). ``repairs``: the kinds of core-state repair it may record (its own repair event
    kind checks them; declaring any lets it record ledger loss, ``capability.loss_recorded``).
    ``repair_argv``: the command (an argv list, ``{goal_id}`` standing for the goal) a contract
    names when the core itself finds a goal damaged (its hash chain fails) and answers ``repair``;
    without one installed, the contract names no command. ``doc``: its contract document,
    ``docs/capabilities/<name>.md`` by default. ``plugin`` and ``distribution`` are filled in by
    :func:`load`. ``default_on``: the capability serves every goal, not only those that enable
    it; allowed only with ``why`` (one sentence), which its document repeats under
    ``## On for every goal``. Every field after ``summary`` is given by keyword. The name lists
    take one name or a sequence and are kept as tuples; ``quota`` is kept as a :class:`QuotaNeeds`.
    """

    name: str
    version: str
    summary: str
    owns: Names = attrs.field(default=(), kw_only=True)
    reads: Names = attrs.field(default=(), kw_only=True)
    quota: QuotaNeeds | dict[str, float] | None = attrs.field(default=None, kw_only=True)
    commands: Names = attrs.field(default=(), kw_only=True)
    user_commands: Names = attrs.field(default=(), kw_only=True)
    actions: Names = attrs.field(default=(), kw_only=True)
    repairs: Names = attrs.field(default=(), kw_only=True)
    repair_argv: Sequence[str] = attrs.field(default=(), kw_only=True)
    doc: str = attrs.field(default="", kw_only=True)
    default_on: bool = attrs.field(default=False, kw_only=True)
    why: str = attrs.field(default="", kw_only=True)
    plugin: str | None = attrs.field(default=None, kw_only=True)
    distribution: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        # attrs' documented way to set a derived value on a frozen instance.
        for field in _LISTS:
            object.__setattr__(self, field, _names(getattr(self, field)))
        object.__setattr__(self, "repair_argv", tuple(self.repair_argv or ()))
        object.__setattr__(self, "quota", _quota(self.quota))
        object.__setattr__(self, "doc", self.doc or f"docs/capabilities/{self.name}.md")

    def owns_namespace(self, namespace: str) -> bool:
        """Whether ``namespace`` is one of this capability's namespaces or inside one."""
        return any(namespace == ns or namespace.startswith(ns + ".") for ns in self.owns)

    def fits(self, remaining: dict | None) -> bool:
        """Whether one run's needs fit in ``remaining`` quota (a missing or ``None`` key = unlimited)."""
        remaining = remaining or {}
        for key in QUOTA_KEYS:
            need = getattr(self.quota, key)
            left = remaining.get(key)
            if need and left is not None and left < need:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """JSON-ready declaration (what ``loopx capabilities show NAME --json`` prints)."""
        out = {}
        for field in (a.name for a in attrs.fields(Capability)):
            value = getattr(self, field)
            out[field] = list(value) if field in (*_LISTS, "repair_argv") else value.to_json() if field == "quota" else value
        return out


_cache: tuple | None = None


def load() -> dict[str, Capability]:
    """Every declared capability by name, validated and checked for conflicts.

    Calls each plugin's ``loopx_register_capabilities`` (so every declaration is tagged with the
    plugin and distribution it came from). The result is cached until the set of registered
    plugins changes. Raises ``plugin_error`` for a malformed declaration and
    ``capability_conflict`` for clashing ones.
    """
    global _cache
    from loopx.seam import plugins

    pm = plugins.get_plugin_manager()
    # The plugin objects themselves, not their ids: the key keeps them alive, so an unregistered
    # plugin's id can never be reused by a new one and match a stale entry.
    generation = getattr(pm, "generation", None)  # (a ContainedPluginManager's: every register moves it)
    key = (pm, generation) if generation is not None else (pm, tuple((name, p) for name, p in pm.list_name_plugin()))
    if _cache is not None and _cache[0] == key:
        return _cache[1]
    found: list[Capability] = []
    for plugin, _builtin, registered in plugins.hooks().register_capabilities():
        declaration = registered.declaration
        if isinstance(declaration, dict):
            try:
                declaration = Capability(**declaration)
            except TypeError as exc:
                raise LoopxError("plugin_error", f"plugin {plugin!r} declared a capability badly: {exc}") from None
        if not isinstance(declaration, Capability):
            raise LoopxError("plugin_error", f"plugin {plugin!r} registered {declaration!r}, not a Capability")
        found.append(validate(declaration.replace(plugin=plugin, distribution=plugins.distributions.get(plugin))))
    check_conflicts(found)
    result = {cap.name: cap for cap in sorted(found, key=lambda c: c.name)}
    _cache = (key, result)
    return result


def get(name: str) -> Capability:
    """The capability called ``name`` (``capability_not_found`` if none is installed)."""
    found = load().get(name)
    if found is None:
        raise LoopxError("capability_not_found", f"no capability {name!r} is installed (see `loopx capabilities list`)")
    return found


def user_commands() -> set[tuple[str, str | None]]:
    """``(command, subcommand or None for all of it)`` of every installed capability's
    ``user_commands``: what the broker refuses inside a turn besides the core's own."""
    out: set[tuple[str, str | None]] = set()
    for cap in load().values():
        for item in cap.user_commands:
            words = item.split()
            out.add((words[0], words[1] if len(words) > 1 else None))
    return out


def owner(namespace: str) -> Capability | None:
    """The capability that owns ``namespace``, if any."""
    for cap in load().values():
        if cap.owns_namespace(namespace):
            return cap
    return None


# --- ownership -------------------------------------------------------------------------------


def capability_of(actor: str) -> str | None:
    """``capability:NAME`` -> ``NAME``; any other actor -> None."""
    if actor.startswith("capability:"):
        return actor.split(":", 1)[1]
    return None


def check_owner(actor: str, namespace: str) -> Capability:
    """The acting capability, if it owns ``namespace``; otherwise ``ownership_violation``."""
    name = capability_of(actor)
    if name is None:
        raise LoopxError("ownership_violation", f"{actor} may not write capability state; only its capability may")
    if not isinstance(namespace, str) or not re.fullmatch(_NAMESPACE_RE, namespace):
        raise LoopxError("invalid_argument", f"{namespace!r} is not a state namespace")
    cap = load().get(name)
    if cap is None:
        raise LoopxError("ownership_violation",
                         f"capability {name!r} is not installed, so it owns no state (it wrote to {namespace!r})")
    if not cap.owns_namespace(namespace):
        holder = owner(namespace)
        whose = f"it belongs to capability {holder.name!r}" if holder else "no capability declares it"
        raise LoopxError(
            "ownership_violation",
            f"capability {name!r} may not write namespace {namespace!r}: {whose}",
            capability=name, namespace=namespace,
        )
    return cap


def check_name(name) -> str:
    """``name`` if it is a well-formed capability name (``invalid_argument`` otherwise)."""
    if not isinstance(name, str) or not re.fullmatch(_NAME_RE, name):
        raise LoopxError("invalid_argument", f"{name!r} is not a capability name")
    return name


#: Actors no capability name may stand for, even spelled ``capability:user``.
_NOT_CAPABILITIES = frozenset({"user", "executor", "dashboard", "core", "loopx"})


def check_acting(name) -> str:
    """``name`` if the code asking may write as ``capability:NAME``; ``actor_forbidden`` otherwise.

    A plugin acts only as a capability it registered itself: the façade knows which plugin
    declared which capability (:attr:`Capability.plugin`) and whose code is asking
    (:func:`loopx.seam.plugins.calling_plugins`). Code that belongs to no plugin (the core, a
    script, a test) may name any well-formed capability; ownership guards still apply.
    """
    check_name(name)
    if name in _NOT_CAPABILITIES:
        raise LoopxError("actor_forbidden", f"{name!r} is not a capability: nothing may write as capability:{name}")
    from loopx.seam import plugins

    asking = plugins.calling_plugins(1)
    if asking is None:
        return name
    mine = sorted(cap.name for cap in load().values() if cap.plugin in asking)
    if name not in mine:
        who = ", ".join(repr(p) for p in sorted(asking))
        raise LoopxError(
            "actor_forbidden",
            f"plugin {who} may act only as the capabilities it registered ({', '.join(mine) or 'none'}), not {name!r}",
            capability=name, plugins=sorted(asking),
        )
    return name


def acting(writer: Writer, name: str) -> AbstractContextManager[Writer]:
    """A writer for a capability's own writes inside an existing mutation.

    A plugin command that, say, creates a goal as the user and then records its own state does
    both in one transaction: ``with acting(w, "issue_fix") as cw: put_state(cw, ...)``. Events
    written through ``cw`` record ``capability:NAME`` as their actor and ownership is checked
    against it; ``w`` itself keeps the actor it was created with. ``NAME`` must be a capability
    the calling plugin registered (:func:`check_acting`): ``actor_forbidden`` otherwise.
    """
    from contextlib import nullcontext

    return nullcontext(writer.as_capability(name))


# --- state -----------------------------------------------------------------------------------


def _check_values(values: dict) -> dict:
    if not isinstance(values, dict) or not values:
        raise LoopxError("invalid_argument", "state values must be a non-empty dict of key -> JSON value")
    if len(values) > MAX_KEYS_PER_WRITE:
        raise LoopxError("invalid_argument", f"at most {MAX_KEYS_PER_WRITE} keys per state write")
    clean = {}
    for key, value in values.items():
        _check_key(key)
        from loopx.values import jsonsafe

        jsonsafe.check_value(value, what=f"state value for {key!r}")
        try:
            text = json.dumps(value, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise LoopxError("invalid_argument", f"state value for {key!r} is not JSON: {exc}") from None
        if len(text.encode("utf-8")) > MAX_VALUE_BYTES:
            raise LoopxError("invalid_argument", f"state value for {key!r} is over {MAX_VALUE_BYTES} bytes")
        clean[key] = json.loads(text)
    return clean


def _check_key(key) -> str:
    if not isinstance(key, str) or not re.fullmatch(_KEY_RE, key):
        raise LoopxError("invalid_argument", f"state key {key!r} must be 1-64 characters of a-z, 0-9, '_', '.', '-'")
    return key


def put_state(writer, namespace: str, values: dict) -> None:
    """Inside a mutation: set ``values`` (key -> JSON value) in ``namespace`` of the writer's goal.

    The writer's actor must be the capability owning ``namespace`` (see :func:`acting`);
    otherwise ``ownership_violation`` and nothing is written.
    """
    writer.emit("capability.state_set", {"namespace": namespace, "values": _check_values(values)})


def drop_state(writer, namespace: str, keys) -> None:
    """Inside a mutation: delete ``keys`` from ``namespace`` of the writer's goal (owner only)."""
    keys = sorted({_check_key(k) for k in keys})
    if not keys:
        raise LoopxError("invalid_argument", "no state keys to delete")
    writer.emit("capability.state_deleted", {"namespace": namespace, "keys": keys})


def set_state(reg, capability: str, goal_id: str, values: dict, *, namespace: str | None = None,
              operation_id: str | None = None) -> dict:
    """Set state keys of ``goal_id`` as ``capability``, in one transaction; returns the namespace's state.

    ``namespace`` defaults to the capability's first owned namespace. Writing a namespace the
    capability does not own raises ``ownership_violation`` and writes nothing.
    """
    from loopx.values.validate import check_id

    check_id("goal", goal_id)
    cap = get(check_acting(capability))
    namespace = namespace or (cap.owns[0] if cap.owns else capability)
    values = _check_values(values)

    def work(w):
        put_state(w, namespace, values)
        return get_state(w.tx, goal_id, namespace)

    return reg.mutate(f"capability:{capability}", work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "capability.state_set", "goal": goal_id, "namespace": namespace, "values": values})


def delete_state(reg, capability: str, goal_id: str, keys, *, namespace: str | None = None,
                 operation_id: str | None = None) -> dict:
    """Delete state keys of ``goal_id`` as ``capability``; returns what remains in the namespace."""
    from loopx.values.validate import check_id

    check_id("goal", goal_id)
    cap = get(check_acting(capability))
    namespace = namespace or (cap.owns[0] if cap.owns else capability)
    keys = sorted(set(keys))

    def work(w):
        drop_state(w, namespace, keys)
        return get_state(w.tx, goal_id, namespace)

    return reg.mutate(f"capability:{capability}", work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "capability.state_deleted", "goal": goal_id, "namespace": namespace, "keys": keys})


def get_state(source, goal_id: str, namespace: str | None = None) -> dict:
    """A goal's capability state: ``{key: value}`` of one namespace, or ``{namespace: {key: value}}``.

    ``source`` is a read transaction (``tx``) or a :class:`~loopx.ledger.registry.Registry`. Anyone may
    read any namespace; only writes are owned.
    """
    if not hasattr(source, "query"):
        with source.read() as tx:
            return get_state(tx, goal_id, namespace)
    # A contract hook's view (``loopx.views.contract.HookTx``) holds the goal's state rows should-run
    # read in this same transaction: answered from them, as the query below would.
    known = getattr(source, "known", None)
    found = known(goal_id, "capability_state") if known is not None else None
    if found is not None:
        if namespace is None:
            return {ns: {k: json.loads(v) for k, v in sorted(kv.items())} for ns, kv in sorted(found.items())}
        return {k: json.loads(v) for k, v in sorted(found.get(namespace, {}).items())}
    from loopx.store.queries import caps as q

    if namespace is None:
        rows = q.goal_state(source, goal_id)
        out: dict[str, dict] = {}
        for r in rows:
            out.setdefault(r["namespace"], {})[r["key"]] = json.loads(r["value"])
        return out
    rows = q.namespace_state(source, goal_id, namespace)
    return {r["key"]: json.loads(r["value"]) for r in rows}


# --- contracts -------------------------------------------------------------------------------


def offerable(goal, remaining: dict | None) -> list[Capability]:
    """The capabilities whose quota needs per run fit in ``remaining`` (``None`` = unlimited).

    ``remaining`` uses the contract's keys (``turns``, ``tokens``, ``wall_seconds``, ...) and is
    what remained *before* the run the capability would work in: a need of one turn is that run
    itself. ``goal`` is accepted so that later rules (per-goal grants) need no signature change.
    """
    return [cap for cap in load().values() if cap.fits(remaining)]


def filter_actions(contributions, goal, remaining: dict | None) -> list[dict]:
    """Drop contract actions contributed by capabilities that are not offerable right now.

    An action names its capability in ``"capability"``; one naming no installed capability is
    dropped too (the declaration is what makes it accountable). Actions without a capability
    (plain plugins) pass through. (Which goals a capability serves: :mod:`loopx.seam.capability_goals`.)
    """
    contributions = list(contributions)
    if not any(isinstance(c, dict) and c.get("capability") for c in contributions):
        return contributions
    offered = {cap.name for cap in offerable(goal, remaining)}
    return [c for c in contributions if not (isinstance(c, dict) and c.get("capability"))
            or c["capability"] in offered]


# --- documents: loopx/seam/capability_docs.py ------------------------------------------------------

_DOCS = ("DOC_SECTIONS", "DEFAULT_ON_SECTION", "doc_sections", "check_doc")

if TYPE_CHECKING:  # what a type checker sees of the lazy names below (tests/test_plugin_api.py: equal to _DOCS)
    from loopx.seam.capability_docs import DEFAULT_ON_SECTION as DEFAULT_ON_SECTION
    from loopx.seam.capability_docs import DOC_SECTIONS as DOC_SECTIONS
    from loopx.seam.capability_docs import check_doc as check_doc
    from loopx.seam.capability_docs import doc_sections as doc_sections
else:

    def __getattr__(name):
        # The document checks live in loopx.seam.capability_docs; these names stay importable from here.
        if name in _DOCS:
            from loopx.seam import capability_docs

            return getattr(capability_docs, name)
        raise AttributeError(f"module 'loopx.seam.capabilities' has no attribute {name!r}")

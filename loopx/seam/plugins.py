"""The plugin manager: built-in parts and entry-point plugins, loaded once, cheaply.

Plugins are found through the ``loopx`` entry-point group. Scanning installed distributions
costs tens of milliseconds, and ``quota should-run`` runs before every agent turn, so the scan
is cached in the user cache directory, keyed on the modification times of every ``sys.path``
directory (installing or removing a distribution changes its site-packages directory).
``LOOPX_PLUGIN_CACHE=0`` turns the cache off.

``LOOPX_PLUGINS`` (comma-separated allow-list of entry-point names) and
``LOOPX_DISABLE_PLUGINS`` (block-list) choose what loads. A plugin that fails to import, or
implements a hook that does not exist, is reported by name and skipped; the core keeps working.
The core calls plugins only through :func:`hooks` (the typed façade, :mod:`loopx.seam.hooks`).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

import pluggy

# The typed façade and its containment live in loopx.seam.hooks (which imports nothing of this module);
# the fault vocabulary stays importable from here.
from loopx.seam.hooks import DEFAULT_HOOK_TIMEOUT as DEFAULT_HOOK_TIMEOUT
from loopx.seam.hooks import ENV_HOOK_TIMEOUT as ENV_HOOK_TIMEOUT
from loopx.seam.hooks import Answer as Answer
from loopx.seam.hooks import ContainedPluginManager, Hooks, Registration, faults
from loopx.seam.hooks import HookFault as HookFault
from loopx.seam.hooks import hook_timeout as hook_timeout
from loopx.seam.hooks import report_fault
from loopx.values.lasting import lasting

if TYPE_CHECKING:
    from loopx.seam.plugin_register import ExecutorRegistration, StoreRegistration

ENTRY_POINT_GROUP = "loopx"
BUILTINS = ("loopx.builtin",)
ENV_ALLOW = "LOOPX_PLUGINS"
ENV_BLOCK = "LOOPX_DISABLE_PLUGINS"
ENV_CACHE = "LOOPX_PLUGIN_CACHE"

_pm: pluggy.PluginManager | None = None
_pm_env: tuple[str | None, str | None] | None = None  # (LOOPX_PLUGINS, LOOPX_DISABLE_PLUGINS) the manager was built with
#: Problems met while loading plugins: ``[(plugin name, one-line message)]``.
load_errors: list[tuple[str, str]] = []
#: ``{plugin name: "distribution version"}`` for entry-point plugins.
distributions: dict[str, str | None] = {}


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use (and again if ``LOOPX_PLUGINS`` or
    ``LOOPX_DISABLE_PLUGINS`` changed since: a test suite choosing its plugins gets exactly those)."""
    global _pm, _pm_env
    env = (os.environ.get(ENV_ALLOW), os.environ.get(ENV_BLOCK))
    if _pm is None or env != _pm_env:
        if _pm is not None:
            reset()
        with lasting("loopx.seam.plugins:plugin manager"):  # lives as long as the process
            _pm, _pm_env = _build(), env
    return _pm


def reset() -> None:
    """Forget the plugin manager (tests use this after changing the environment)."""
    global _pm
    _pm = None
    load_errors.clear()
    distributions.clear()
    faults.clear()
    _vocabulary.clear()


def _names(env: str) -> set[str] | None:
    value = os.environ.get(env)
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def _build() -> pluggy.PluginManager:
    import importlib

    from loopx.seam import hookspecs

    # Every implementation registered here (and later, by tests) is contained: see loopx.seam.hooks.
    pm = ContainedPluginManager("loopx")
    for name in hookspecs.MODULES:
        pm.add_hookspecs(importlib.import_module(name))
    for name in BUILTINS:
        pm.register(importlib.import_module(name), name=name)
    allow, block = _names(ENV_ALLOW), _names(ENV_BLOCK) or set()
    for ep_name, value, dist in entry_points():
        if (allow is not None and ep_name not in allow) or ep_name in block:
            continue
        try:
            module = importlib.import_module(value.split(":", 1)[0])
            obj = module
            if ":" in value:
                for attr in value.split(":", 1)[1].split("."):
                    obj = getattr(obj, attr)
            pm.register(obj, name=ep_name)
            distributions[ep_name] = dist
        except Exception as exc:  # a broken plugin must not take the core down
            _report(ep_name, f"failed to load: {type(exc).__name__}: {exc}")
            continue
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            pm.unregister(name=ep_name)
            _report(ep_name, f"rejected: {exc}")
    return pm


def _report(name: str, message: str) -> None:
    load_errors.append((name, message))
    print(f"loopx: plugin {name!r} {message}", file=sys.stderr)


def entry_points() -> list[tuple[str, str, str | None]]:
    """``[(name, "module:attr", "distribution version")]`` of the ``loopx`` entry-point group, cached (see module doc)."""
    import json

    # sys.path[0] is the script's directory or the working directory: it changes all the time
    # and never holds installed distributions, so it stays out of the key.
    key = [[p, _mtime(p)] for p in sys.path[1:]]
    use_cache = os.environ.get(ENV_CACHE, "1") != "0"
    cache = _cache_file() if use_cache else None
    if cache is not None:
        try:
            data = json.loads(cache.read_text())
            if data.get("key") == key and data.get("python") == sys.executable:
                return [(str(n), str(v), d) for n, v, d in data["entry_points"]]
        except (OSError, ValueError, KeyError):
            pass
    from importlib.metadata import entry_points as scan

    found: list[tuple[str, str, str | None]] = []
    seen: set[str] = set()
    for ep in scan(group=ENTRY_POINT_GROUP):
        if ep.name not in seen:  # the first on sys.path wins, as for imports
            seen.add(ep.name)
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else None
            found.append((ep.name, ep.value, dist))
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "python": sys.executable, "entry_points": found}))
            os.replace(tmp, cache)
        except OSError:
            pass
    return found


def _mtime(path: str) -> int:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return 0


def _cache_file() -> Path:
    import zlib

    # One cache per interpreter (virtualenvs differ in what is installed); crc32 is enough to
    # tell a handful of paths apart and, unlike hashlib, costs nothing to import.
    tag = f"{zlib.crc32(sys.executable.encode()):08x}"
    return _cache_dir() / f"entry-points-{tag}.json"


def _cache_dir() -> Path:
    """platformdirs' ``user_cache_dir("loopx")`` (:mod:`loopx.values.userdirs`), asked by every command
    that loads plugins."""
    from loopx.values import userdirs

    return Path(userdirs.cache_dir())


# --- the façade: every hook call goes through loopx.seam.hooks.Hooks -------------------------------------

_hooks: tuple[pluggy.PluginManager, Hooks] | None = None  # (plugin manager, its façade)


def hooks() -> Hooks:
    """The typed façade over the process-wide plugin manager (:class:`loopx.seam.hooks.Hooks`): the core calls plugins only through it."""
    global _hooks
    pm = get_plugin_manager()
    if _hooks is None or _hooks[0] is not pm:
        _hooks = (pm, Hooks(pm, BUILTINS))
    return _hooks[1]


def named(registered: list[Registration[StoreRegistration]] | list[Registration[ExecutorRegistration]],
          what: str) -> dict[str, tuple[object, str]]:
    """``{key: (value, plugin)}`` from the registrations of a hook whose implementations call
    ``register(key, value)`` (stores and executors) (``named(hooks().register_stores(), "storage scheme")``).

    The one rule for "a plugin replaces a built-in": built-ins are ``trylast``, so a plugin's
    registration of a key comes first and wins over a built-in's; two plugins registering one key
    is a ``plugin_error`` naming both.
    """
    from loopx.values.errors import LoopxError

    found: dict[str, tuple[object, str]] = {}
    from loopx.seam.plugin_register import StoreRegistration

    for plugin, builtin, item in registered:
        pair = (item.scheme, item.factory) if isinstance(item, StoreRegistration) else (item.name, item.provider)
        key, value = str(pair[0]).lower(), pair[1]
        if key in found:
            if builtin:
                continue
            raise LoopxError("plugin_error", f"plugins {found[key][1]!r} and {plugin!r} both register the {what} "
                             f"{key!r}; disable one (LOOPX_DISABLE_PLUGINS={plugin})")
        found[key] = (value, plugin)
    return found


# --- the vocabulary plugins add ------------------------------------------------------------------

_NAMESPACED: re.Pattern[str] | None = None
_vocabulary: dict[str, tuple[object, Any]] = {}
T = TypeVar("T")


def _namespaced(value: object) -> bool:
    global _NAMESPACED
    if _NAMESPACED is None:
        _NAMESPACED = re.compile(r"[a-z][a-z0-9_]{0,39}\.[a-z][a-z0-9_]{0,63}")
    return isinstance(value, str) and bool(_NAMESPACED.fullmatch(value))


def _cached(what: str, build: Callable[[], T]) -> T:
    pm = get_plugin_manager()
    # The plugin objects themselves, not their ids: the key keeps them alive, so an unregistered
    # plugin's id can never be reused by a new one and match a stale entry.
    key = (pm, tuple((name, p) for name, p in pm.list_name_plugin()))
    found = _vocabulary.get(what)
    if found is None or found[0] != key:
        found = (key, build())
        _vocabulary[what] = found
    value: T = found[1]
    return value


def error_codes() -> dict[str, str]:
    """``{code: description}`` of every plugin's ``loopx_register_error_codes`` (namespaced codes)."""

    def build() -> dict[str, str]:
        out = {}
        for plugin, _builtin, item in hooks().register_error_codes():
            code, description = item.code, item.description if isinstance(item.description, str) else ""
            if not _namespaced(code):
                report_fault(plugin, "loopx_register_error_codes",
                             f"registered {code!r}, which is not a namespaced code like 'my_plugin.not_found'")
                continue
            out[code] = description
        return out

    return _cached("error_codes", build)


def _load_error_codes() -> None:
    from loopx.values import errors

    errors.PLUGIN_CODES.clear()
    errors.PLUGIN_CODES.update(error_codes())


def event_kinds(core_areas: Iterable[str] = (), retired: Iterable[str] = ()) -> dict[str, tuple[Any, ...]]:
    """``{name: (apply, writers, guard, plugin)}`` of every plugin's ``loopx_register_event_kinds``.

    A kind must be namespaced outside the core's areas, and writable only by ``user``,
    ``executor`` or ``capability``; anything else is reported and skipped. Two plugins
    registering one kind is a ``plugin_error``. A kind's former names (``formerly=``: its own
    older names, or core kinds in ``retired`` that moved into the plugin) map to the same
    ``apply`` with no writers: the ledger may hold them, nobody writes them again.
    """
    from loopx.values.errors import LoopxError

    def build() -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {}

        def add(name: str, entry: tuple[Any, ...], plugin: str) -> None:
            if name in out:
                raise LoopxError("plugin_error", f"plugins {out[name][3]!r} and {plugin!r} both register the event "
                                 f"kind {name!r}; disable one (LOOPX_DISABLE_PLUGINS={plugin})")
            out[name] = entry

        for plugin, _builtin, kind in hooks().register_event_kinds():
            name, apply, guard = kind.name, kind.apply, kind.guard
            writers = (kind.writers,) if isinstance(kind.writers, str) else tuple(kind.writers or ())
            formerly = kind.formerly or ()
            formerly = (formerly,) if isinstance(formerly, str) else tuple(formerly)
            problem = None
            if not _namespaced(name) or name.split(".")[0] in core_areas:
                problem = f"registered the event kind {name!r}: kinds are '<namespace>.<verb>' outside the core's areas"
            elif not callable(apply):
                problem = f"registered the event kind {name!r} without an apply(tx, event) function"
            elif not writers or not set(writers) <= {"user", "executor", "capability"}:
                problem = f"event kind {name!r}: writers must be some of user, executor, capability, not {writers!r}"
            elif name.endswith(".repaired") and not _core_repair_kind(apply, guard, writers):
                # The core replays NAME.repaired itself when its plugin is gone (loopx.ledger.log.core_repair):
                # only a kind that is the core's repair, under the core's guard, may carry the name.
                problem = (f"event kind {name!r}: a '.repaired' kind is a repair of the core's vocabulary:"
                           " register it with loopx.api's RepairSession.apply_event and .guard_event,"
                           " writers=('capability',)")
            else:
                for old in formerly:
                    if not _namespaced(old) or (old.split(".")[0] in core_areas and old not in retired):
                        problem = (f"event kind {name!r}: formerly={old!r} is neither a namespaced kind outside the"
                                   " core's areas nor a core kind that moved out of the core")
            if problem:
                report_fault(plugin, "loopx_register_event_kinds", problem)
                continue
            add(name, (apply, frozenset(writers), guard, plugin), plugin)
            for old in formerly:
                add(old, (apply, frozenset(), None, plugin), plugin)
        return out

    return _cached("event_kinds", build)


def _core_repair_kind(apply: object, guard: object, writers: Iterable[str]) -> bool:
    """Whether a kind registered with ``apply``, ``guard`` and ``writers`` is exactly the core's
    repair event: :func:`loopx.ledger.events.repair.apply_event`, :func:`loopx.domain.repairs.guard_event`
    or ``RepairSession.guard_event`` (:func:`loopx.domain.repair_session.guard_event`, which calls it;
    named, not imported: the plugin seam sits below both), written by capabilities only."""

    def named(fn: object, module: str, qualname: str) -> bool:
        return getattr(fn, "__module__", None) == module and getattr(fn, "__qualname__", None) == qualname

    return (set(writers) == {"capability"} and named(apply, "loopx.ledger.events.repair", "apply_event")
            and (named(guard, "loopx.domain.repairs", "guard_event")
                 or named(guard, "loopx.domain.repair_session", "guard_event")))


def _homes() -> dict[str, set[str]]:
    """``{home: {plugin name, ...}}``: where each registered plugin's code lives.

    A module plugin's home is its top-level package (``loopx_self_repair`` for
    ``loopx_self_repair.plugin``), an object plugin's the module its class is defined in.
    LoopX's built-ins have none.
    """

    def build() -> dict[str, set[str]]:
        import types

        out: dict[str, set[str]] = {}
        for name, obj in get_plugin_manager().list_name_plugin():
            if name in BUILTINS or obj is None:
                continue
            if isinstance(obj, types.ModuleType):
                home = obj.__name__.split(".", 1)[0]
            else:
                home = type(obj).__module__
            if home and home != "loopx" and home != "builtins":
                out.setdefault(home, set()).add(name)
        return out

    return _cached("homes", build)


def calling_plugins(depth: int = 2) -> set[str] | None:
    """The plugins whose code called into the core here: the names of the registered plugins
    whose home holds the nearest calling frame that lives in any plugin's home; ``None`` when
    no plugin's code is on the stack (the core itself, a script, a test).

    Not a security boundary (plugins are Python in the same process): it keeps a plugin from
    *accidentally* or carelessly speaking for a capability that is not its own.
    """
    homes = _homes()
    if not homes:
        return None
    import inspect  # (pluggy imported it already)

    frame = inspect.currentframe()
    for _ in range(depth):
        frame = frame.f_back if frame is not None else None
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module != "loopx" and not module.startswith("loopx."):
            top = module.split(".", 1)[0]
            found = homes.get(module) or homes.get(top)
            if found:
                return found
        frame = frame.f_back
    return None


def store_factories() -> dict[str, Any]:
    """``{scheme: factory}`` from every plugin's ``loopx_register_stores``."""
    return {k: v for k, (v, _) in named(hooks().register_stores(), "storage scheme").items()}


def describe() -> list[dict[str, Any]]:
    """Every registered plugin with the hooks it implements, plus load errors."""
    pm = get_plugin_manager()
    out = []
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        out.append({
            "name": name,
            "builtin": name in BUILTINS,
            "hooks": hooks,
            "distribution": distributions.get(name),
        })
    for name, message in load_errors:
        out.append({"name": name, "builtin": False, "hooks": [], "error": message})
    return out


def _install() -> None:
    from loopx.values import errors

    errors.add_code_loader(_load_error_codes)


_install()

"""The plugin manager: built-in parts and entry-point plugins, loaded once, cheaply.

Plugins are found through the ``loopx`` entry-point group. Scanning installed distributions
costs tens of milliseconds, and ``quota should-run`` runs before every agent turn, so the scan
is cached in the user cache directory, keyed on the modification times of every ``sys.path``
directory (installing or removing a distribution changes its site-packages directory).
``LOOPX_PLUGIN_CACHE=0`` turns the cache off.

``LOOPX_PLUGINS`` (comma-separated allow-list of entry-point names) and
``LOOPX_DISABLE_PLUGINS`` (block-list) choose what loads. A plugin that fails to import, or
implements a hook that does not exist, is reported by name and skipped; the core keeps working.
The core calls plugins only through :func:`hooks` (the typed façade, :mod:`loopx.hooks`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pluggy

# The typed façade and its containment live in loopx.hooks (which imports nothing of this module);
# the fault vocabulary stays importable from here.
from loopx.hooks import (  # noqa: F401
    DEFAULT_HOOK_TIMEOUT, ENV_HOOK_TIMEOUT, Answer, ContainedPluginManager, HookFault, Hooks, Registration, faults,
    hook_timeout, report_fault,
)

ENTRY_POINT_GROUP = "loopx"
BUILTINS = ("loopx.builtin",)
ENV_ALLOW = "LOOPX_PLUGINS"
ENV_BLOCK = "LOOPX_DISABLE_PLUGINS"
ENV_CACHE = "LOOPX_PLUGIN_CACHE"

_pm: pluggy.PluginManager | None = None
_pm_env: tuple | None = None  # (LOOPX_PLUGINS, LOOPX_DISABLE_PLUGINS) the manager was built with
#: Problems met while loading plugins: ``[(plugin name, one-line message)]``.
load_errors: list[tuple[str, str]] = []
#: ``{plugin name: "distribution version"}`` for entry-point plugins.
distributions: dict[str, str | None] = {}


#: os.environ's own bytes mapping on POSIX (what ``os.environ[...] = ...`` changes), else None.
_RAW = getattr(os.environ, "_data", None) if os.name == "posix" and os.environ.encodekey("A") == b"A" else None


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use (and again if ``LOOPX_PLUGINS`` or
    ``LOOPX_DISABLE_PLUGINS`` changed since: a test suite choosing its plugins gets exactly those)."""
    global _pm, _pm_env
    # Asked several times by every write and every turn: os.environ's own mapping read directly
    # (os.environ.get encodes the name and, for a variable not set, raises and catches KeyError).
    env = ((_RAW.get(b"LOOPX_PLUGINS"), _RAW.get(b"LOOPX_DISABLE_PLUGINS")) if _RAW is not None
           else (os.environ.get(ENV_ALLOW), os.environ.get(ENV_BLOCK)))
    if _pm is None or env != _pm_env:
        if _pm is not None:
            reset()
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

    from loopx import hookspecs

    # Every implementation registered here (and later, by tests) is contained: see loopx.hooks.
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
    if use_cache:
        try:
            data = json.loads(cache.read_text())
            if data.get("key") == key and data.get("python") == sys.executable:
                return [tuple(x) for x in data["entry_points"]]
        except (OSError, ValueError, KeyError):
            pass
    from importlib.metadata import entry_points as scan

    found, seen = [], set()
    for ep in scan(group=ENTRY_POINT_GROUP):
        if ep.name not in seen:  # the first on sys.path wins, as for imports
            seen.add(ep.name)
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else None
            found.append((ep.name, ep.value, dist))
    if use_cache:
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
    """platformdirs' ``user_cache_dir("loopx")`` (:mod:`loopx.userdirs`), asked by every command
    that loads plugins."""
    from loopx import userdirs

    return Path(userdirs.cache_dir())


# --- the façade: every hook call goes through loopx.hooks.Hooks -------------------------------------

_hooks: tuple | None = None  # (plugin manager, its façade)


def hooks() -> Hooks:
    """The typed façade over the process-wide plugin manager (:class:`loopx.hooks.Hooks`): the core calls plugins only through it."""
    global _hooks
    pm = get_plugin_manager()
    if _hooks is None or _hooks[0] is not pm:
        _hooks = (pm, Hooks(pm, BUILTINS))
    return _hooks[1]


def named(registered: list[Registration], what: str) -> dict[str, tuple[object, str]]:
    """``{key: (value, plugin)}`` from the registrations of a hook whose implementations call
    ``register(key, value)`` (``named(hooks().register_stores(), "storage scheme")``).

    The one rule for "a plugin replaces a built-in": built-ins are ``trylast``, so a plugin's
    registration of a key comes first and wins over a built-in's; two plugins registering one key
    is a ``plugin_error`` naming both.
    """
    from loopx.errors import LoopxError

    found: dict[str, tuple[object, str]] = {}
    for plugin, builtin, args in registered:
        key, value = str(args[0]).lower(), args[1]
        if key in found:
            if builtin:
                continue
            raise LoopxError("plugin_error", f"plugins {found[key][1]!r} and {plugin!r} both register the {what} "
                             f"{key!r}; disable one (LOOPX_DISABLE_PLUGINS={plugin})")
        found[key] = (value, plugin)
    return found


# --- the vocabulary plugins add ------------------------------------------------------------------

_NAMESPACED = None
_vocabulary: dict = {}


def _namespaced(value) -> bool:
    global _NAMESPACED
    if _NAMESPACED is None:
        import re

        _NAMESPACED = re.compile(r"[a-z][a-z0-9_]{0,39}\.[a-z][a-z0-9_]{0,63}")
    return isinstance(value, str) and bool(_NAMESPACED.fullmatch(value))


def _cached(what: str, build):
    pm = get_plugin_manager()
    # The plugin objects themselves, not their ids: the key keeps them alive, so an unregistered
    # plugin's id can never be reused by a new one and match a stale entry.
    key = (pm, tuple((name, p) for name, p in pm.list_name_plugin()))
    found = _vocabulary.get(what)
    if found is None or found[0] != key:
        found = (key, build())
        _vocabulary[what] = found
    return found[1]


def error_codes() -> dict[str, str]:
    """``{code: description}`` of every plugin's ``loopx_register_error_codes`` (namespaced codes)."""

    def build():
        out = {}
        for plugin, _builtin, (code, description) in hooks().register_error_codes():
            description = description if isinstance(description, str) else ""
            if not _namespaced(code):
                report_fault(plugin, "loopx_register_error_codes",
                             f"registered {code!r}, which is not a namespaced code like 'my_plugin.not_found'")
                continue
            out[code] = description
        return out

    return _cached("error_codes", build)


def _load_error_codes() -> None:
    from loopx import errors

    errors.PLUGIN_CODES.clear()
    errors.PLUGIN_CODES.update(error_codes())


def event_kinds(core_areas=(), retired=()) -> dict[str, tuple]:
    """``{name: (apply, writers, guard, plugin)}`` of every plugin's ``loopx_register_event_kinds``.

    A kind must be namespaced outside the core's areas, and writable only by ``user``,
    ``executor`` or ``capability``; anything else is reported and skipped. Two plugins
    registering one kind is a ``plugin_error``. A kind's former names (``formerly=``: its own
    older names, or core kinds in ``retired`` that moved into the plugin) map to the same
    ``apply`` with no writers: the ledger may hold them, nobody writes them again.
    """
    from loopx.errors import LoopxError

    def build():
        out: dict[str, tuple] = {}

        def add(name, entry, plugin):
            if name in out:
                raise LoopxError("plugin_error", f"plugins {out[name][3]!r} and {plugin!r} both register the event "
                                 f"kind {name!r}; disable one (LOOPX_DISABLE_PLUGINS={plugin})")
            out[name] = entry

        for plugin, _builtin, (name, apply, writers, guard, formerly) in hooks().register_event_kinds():
            writers = (writers,) if isinstance(writers, str) else tuple(writers or ())
            formerly = formerly or ()
            formerly = (formerly,) if isinstance(formerly, str) else tuple(formerly)
            problem = None
            if not _namespaced(name) or name.split(".")[0] in core_areas:
                problem = f"registered the event kind {name!r}: kinds are '<namespace>.<verb>' outside the core's areas"
            elif not callable(apply):
                problem = f"registered the event kind {name!r} without an apply(tx, event) function"
            elif not writers or not set(writers) <= {"user", "executor", "capability"}:
                problem = f"event kind {name!r}: writers must be some of user, executor, capability, not {writers!r}"
            elif name.endswith(".repaired") and not _core_repair_kind(apply, guard, writers):
                # The core replays NAME.repaired itself when its plugin is gone (loopx.ledger.core_repair):
                # only a kind that is the core's repair, under the core's guard, may carry the name.
                problem = (f"event kind {name!r}: a '.repaired' kind is a repair of the core's vocabulary:"
                           " register it with loopx.api's repair_event_apply and repair_event_guard,"
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


def _core_repair_kind(apply, guard, writers) -> bool:
    """Whether a kind registered with ``apply``, ``guard`` and ``writers`` is exactly the core's
    repair event: :func:`loopx.events.repair.apply_event`, :func:`loopx.repairs.guard_event`
    (named, not imported: the plugin seam sits below both), written by capabilities only."""

    def named(fn, module: str, qualname: str) -> bool:
        return getattr(fn, "__module__", None) == module and getattr(fn, "__qualname__", None) == qualname

    return (set(writers) == {"capability"} and named(apply, "loopx.events.repair", "apply_event")
            and named(guard, "loopx.repairs", "guard_event"))


def _homes() -> dict[str, set]:
    """``{home: {plugin name, ...}}``: where each registered plugin's code lives.

    A module plugin's home is its top-level package (``loopx_self_repair`` for
    ``loopx_self_repair.plugin``), an object plugin's the module its class is defined in.
    LoopX's built-ins have none.
    """

    def build():
        import types

        out: dict[str, set] = {}
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


def calling_plugins(depth: int = 2) -> set | None:
    """The plugins whose code called into the core here: the names of the registered plugins
    whose home holds the nearest calling frame that lives in any plugin's home; ``None`` when
    no plugin's code is on the stack (the core itself, a script, a test).

    Not a security boundary (plugins are Python in the same process): it keeps a plugin from
    *accidentally* or carelessly speaking for a capability that is not its own.
    """
    homes = _homes()
    if not homes:
        return None
    frame = sys._getframe(depth)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module != "loopx" and not module.startswith("loopx."):
            top = module.split(".", 1)[0]
            found = homes.get(module) or homes.get(top)
            if found:
                return found
        frame = frame.f_back
    return None


def store_factories() -> dict:
    """``{scheme: factory}`` from every plugin's ``loopx_register_stores``."""
    return {k: v for k, (v, _) in named(hooks().register_stores(), "storage scheme").items()}


def describe() -> list[dict]:
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
    from loopx import errors

    errors.add_code_loader(_load_error_codes)


_install()

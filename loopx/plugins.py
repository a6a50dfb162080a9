"""The plugin manager: built-in parts and entry-point plugins, loaded once, cheaply.

Plugins are found through the ``loopx`` entry-point group. Scanning installed distributions
costs tens of milliseconds, and ``quota should-run`` runs before every agent turn, so the scan
is cached in the user cache directory, keyed on the modification times of every ``sys.path``
directory (installing or removing a distribution changes its site-packages directory).
``LOOPX_PLUGIN_CACHE=0`` turns the cache off.

``LOOPX_PLUGINS`` (comma-separated allow-list of entry-point names) and
``LOOPX_DISABLE_PLUGINS`` (block-list) choose what loads. A plugin that fails to import, or
implements a hook that does not exist, is reported by name and skipped; the core keeps working.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pluggy

ENTRY_POINT_GROUP = "loopx"
BUILTINS = ("loopx.builtin",)
ENV_ALLOW = "LOOPX_PLUGINS"
ENV_BLOCK = "LOOPX_DISABLE_PLUGINS"
ENV_CACHE = "LOOPX_PLUGIN_CACHE"

_pm: pluggy.PluginManager | None = None
#: Problems met while loading plugins: ``[(plugin name, one-line message)]``.
load_errors: list[tuple[str, str]] = []
#: ``{plugin name: "distribution version"}`` for entry-point plugins.
distributions: dict[str, str | None] = {}


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use."""
    global _pm
    if _pm is None:
        _pm = _build()
    return _pm


def reset() -> None:
    """Forget the plugin manager (tests use this after changing the environment)."""
    global _pm
    _pm = None
    load_errors.clear()
    distributions.clear()


def _names(env: str) -> set[str] | None:
    value = os.environ.get(env)
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def _build() -> pluggy.PluginManager:
    import importlib

    from loopx import hookspecs

    pm = pluggy.PluginManager("loopx")
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
    cache = _cache_file()
    use_cache = os.environ.get(ENV_CACHE, "1") != "0"
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

    import platformdirs

    # One cache per interpreter (virtualenvs differ in what is installed); crc32 is enough to
    # tell a handful of paths apart and, unlike hashlib, costs nothing to import.
    tag = f"{zlib.crc32(sys.executable.encode()):08x}"
    return Path(platformdirs.user_cache_dir("loopx", appauthor=False)) / f"entry-points-{tag}.json"


def store_factories() -> dict:
    """``{scheme: factory}`` from every plugin's ``loopx_register_stores``."""
    found: dict = {}

    def register(scheme, factory):
        # Hooks run first-registered-last; trylast built-ins come last, so the first
        # registration for a scheme (a plugin's) wins over the built-in default.
        found.setdefault(scheme.lower(), factory)

    get_plugin_manager().hook.loopx_register_stores(register=register)
    return found


def notify_committed(registry, events) -> None:
    """Tell ``loopx_event_committed`` observers about committed events; never raises."""
    pm = get_plugin_manager()
    if not pm.hook.loopx_event_committed.get_hookimpls():
        return
    try:
        pm.hook.loopx_event_committed(registry=registry, events=events)
    except Exception as exc:
        print(f"loopx: an event observer failed: {type(exc).__name__}: {exc}", file=sys.stderr)


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

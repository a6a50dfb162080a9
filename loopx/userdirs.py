"""LoopX's user directories: platformdirs' ``user_config_dir`` / ``user_cache_dir`` /
``user_data_dir`` of ``"loopx"``, without importing platformdirs where its rule is plain.

Every write reads the integrity key (in the config directory) and every Issue-Fix step runs in
the private root (in the cache directory), and importing platformdirs costs ~5 ms (its Unix module
imports ``tempfile``, ``shutil`` and more). On Linux the rule is the XDG one: the variable when
it is an absolute path, else ``~/.config`` (``~/.cache``, ``~/.local/share``) expanded from an
absolute ``$HOME``; that is applied here. Everything else - another platform, Android, a relative
XDG variable, no usable ``$HOME`` - asks platformdirs, whose versions differ there.

Every user of these directories asks here, so the key's directory and the one a step may not read
(:func:`loopx.confine.config_dir`) are one answer, whichever way it was found.
"""

from __future__ import annotations

import os
import posixpath
import sys

#: directory kind -> (XDG variable, default below $HOME, platformdirs function)
_KINDS = {
    "config": ("XDG_CONFIG_HOME", "~/.config", "user_config_dir"),
    "cache": ("XDG_CACHE_HOME", "~/.cache", "user_cache_dir"),
    "data": ("XDG_DATA_HOME", "~/.local/share", "user_data_dir"),
    "state": ("XDG_STATE_HOME", "~/.local/state", "user_state_dir"),
}


def config_dir() -> str:
    """``platformdirs.user_config_dir("loopx", appauthor=False)``."""
    return _user_dir("config")


def cache_dir() -> str:
    """``platformdirs.user_cache_dir("loopx", appauthor=False)``."""
    return _user_dir("cache")


def data_dir() -> str:
    """``platformdirs.user_data_dir("loopx", appauthor=False)``."""
    return _user_dir("data")


def state_dir() -> str:
    """``platformdirs.user_state_dir("loopx", appauthor=False)``."""
    return _user_dir("state")


def _user_dir(kind: str) -> str:
    variable, default, function = _KINDS[kind]
    if sys.platform.startswith("linux") and not hasattr(sys, "getandroidapilevel") and not (
            os.environ.get("ANDROID_DATA") or os.environ.get("ANDROID_ROOT")):
        value = os.environ.get(variable, "")
        if posixpath.isabs(value):
            return os.path.join(value, "loopx")
        if not value.strip() and posixpath.isabs(os.environ.get("HOME", "")):
            return os.path.join(os.path.expanduser(default), "loopx")
    import platformdirs

    return getattr(platformdirs, function)("loopx", appauthor=False)

"""LoopX's user directories: platformdirs' config, cache, data and state directories of ``"loopx"``.

Every user of these directories asks here, so the key's directory and the one a step may not read
(:func:`loopx.turn.confine.config_dir`) are one answer, and the application's name is spelt once.
"""

from __future__ import annotations

import platformdirs

#: ``appauthor=False``: no vendor folder on Windows (``%LOCALAPPDATA%\\loopx``, not ``...\\loopx\\loopx``).
_DIRS = platformdirs.PlatformDirs("loopx", appauthor=False)


def config_dir() -> str:
    """``platformdirs.user_config_dir("loopx", appauthor=False)``: the integrity keys live here."""
    return _DIRS.user_config_dir


def cache_dir() -> str:
    """``platformdirs.user_cache_dir("loopx", appauthor=False)``: the entry-point cache, the private root."""
    return _DIRS.user_cache_dir


def data_dir() -> str:
    """``platformdirs.user_data_dir("loopx", appauthor=False)``: the default registry, artifacts, agent homes."""
    return _DIRS.user_data_dir


def state_dir() -> str:
    """``platformdirs.user_state_dir("loopx", appauthor=False)``: the worker's log."""
    return _DIRS.user_state_dir

"""LoopX: a local-first control plane for long-running AI agents."""

__version__ = "0.1.0"

import pluggy as _pluggy

#: Mark a plugin's hook implementations: ``@loopx.hookimpl``.
hookimpl = _pluggy.HookimplMarker("loopx")

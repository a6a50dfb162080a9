"""``loopx.api.registrars``: the types of the ``register`` argument each register hook receives,
for a plugin's annotations (``def loopx_register_error_codes(register: registrars.ErrorCodes)``)."""

from __future__ import annotations

from loopx.seam.plugin_register import CapabilityRegistrar as Capabilities
from loopx.seam.plugin_register import ErrorCodeRegistrar as ErrorCodes
from loopx.seam.plugin_register import EventKindRegistrar as EventKinds
from loopx.seam.plugin_register import ExecutorRegistrar as Executors
from loopx.seam.plugin_register import StoreRegistrar as Stores

__all__ = ["Capabilities", "ErrorCodes", "EventKinds", "Executors", "Stores"]

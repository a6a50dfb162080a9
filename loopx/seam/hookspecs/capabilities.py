"""Hooks through which capabilities declare themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx.seam.hookspecs import hookspec, spec_names

if TYPE_CHECKING:
    from loopx.seam.plugin_register import CapabilityRegistrar


@hookspec
def loopx_register_capabilities(register: CapabilityRegistrar) -> None:
    """Declare capabilities.

    Call ``register(declaration)`` once per capability with a
    :class:`loopx.seam.capabilities.Capability` (or a dict of its fields): its name, version, summary,
    the state namespaces it owns and the state it reads, its quota needs per run (``turns``,
    ``tokens``, ``wall_seconds``), the commands and contract actions it adds, the core repairs it
    may record, and the path of its document (``docs/capabilities/<name>.md``).

    The core holds the plugin to it: a malformed declaration is a ``plugin_error``; two
    capabilities owning one namespace (or one name) is a ``capability_conflict`` naming both; a
    capability writes ``capability_state`` only in namespaces it owns (``ownership_violation``
    otherwise, nothing written); and its contract actions are offered only while its quota needs
    fit what remains. Build the declaration inside the hook and import nothing heavy.
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only

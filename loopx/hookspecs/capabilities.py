"""Hooks through which capabilities declare themselves."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_register_capabilities(register):
    """Declare capabilities.

    Call ``register(declaration)`` with a :class:`loopx.capabilities.Capability`: its name,
    version, summary, the state namespaces it owns and reads, its quota needs per run, the
    commands and contract actions it adds, and the path of its document under
    ``docs/capabilities/``. Two capabilities owning one namespace is a load error.
    """

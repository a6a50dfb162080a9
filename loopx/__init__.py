"""LoopX: a local-first control plane for long-running AI agents."""

__version__ = "0.1.0"

# What a type checker sees of the lazy name below (mypy and pyright treat a name TYPE_CHECKING as
# typing's; a constant here costs nothing, where importing typing would on every start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import pluggy

    hookimpl: pluggy.HookimplMarker


def __getattr__(name: str) -> "pluggy.HookimplMarker":
    """``loopx.hookimpl`` (mark a plugin's hook implementations: ``@loopx.hookimpl``), made on
    first use: importing pluggy costs about 12 ms, and the processes that never touch a plugin
    (the ``loopx`` a confined step runs, which only forwards its argv to the broker) import this
    package too."""
    if name == "hookimpl":
        import pluggy

        global hookimpl
        hookimpl = pluggy.HookimplMarker("loopx")
        return hookimpl
    raise AttributeError(f"module 'loopx' has no attribute {name!r}")

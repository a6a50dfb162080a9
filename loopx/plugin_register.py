"""The ``register`` callables that register-style hooks hand a plugin, with real signatures.

Each hook's ``register`` is built from a prototype with the signature docs/plugins.md shows:
positional and keyword calls both work and are normalised to one argument tuple, and a call
that does not fit is a :class:`RegisterMisuse` the plugin layer reports naming the plugin, never
a silent mis-registration or an ``IndexError`` later on.
"""

from __future__ import annotations


# The ``register`` callable each register-style hook receives, as a prototype with the real
# signature docs/plugins.md shows: positional and keyword calls both work, and a wrong call is a
# fault naming the plugin (never a silent mis-registration or an IndexError later on).
def _store(scheme, factory):
    return (scheme, factory)


def _executor(name, provider):
    return (name, provider)


def _capability(declaration):
    return (declaration,)


def _event_kind(name, apply, writers=("capability",), guard=None, formerly=()):
    return (name, apply, writers, guard, formerly)


def _error_code(code, description=""):
    return (code, description)


REGISTER_SIGNATURES = {
    "loopx_register_stores": (_store, "register(scheme, factory)"),
    "loopx_register_executors": (_executor, "register(name, provider)"),
    "loopx_register_capabilities": (_capability, "register(declaration)"),
    "loopx_register_event_kinds": (_event_kind, "register(name, apply, writers=('capability',), guard=None, formerly=())"),
    "loopx_register_error_codes": (_error_code, "register(code, description='')"),
}


class RegisterMisuse(TypeError):
    """A plugin called a hook's ``register`` with arguments its signature does not take."""


def register_callable(name: str, sink: list):
    """The ``register`` callable hook ``name`` hands a plugin: it has the prototype's signature
    (``inspect.signature`` shows it), appends the normalised arguments to ``sink``, and raises
    :class:`RegisterMisuse` on a call that does not fit."""
    import functools

    proto, shown = REGISTER_SIGNATURES[name]

    @functools.wraps(proto)
    def register(*args, **kwargs):
        try:
            sink.append(proto(*args, **kwargs))
        except TypeError as exc:
            why = str(exc).split(") ", 1)[-1] if ") " in str(exc) else str(exc)
            raise RegisterMisuse(f"called {shown} wrongly: {why}") from None

    register.__name__ = register.__qualname__ = "register"
    return register

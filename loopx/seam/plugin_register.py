"""The registrar objects that register-style hooks hand a plugin, and the records they make.

Each register hook (``loopx_register_stores(register)``, ...) receives a registrar: an object
called like a function, with the signature docs/plugins.md shows (``inspect.signature``
shows it, and a type checker sees the annotated one). Each call makes one typed record
(:class:`StoreRegistration`, :class:`ExecutorRegistration`, :class:`CapabilityRegistration`,
:class:`EventKindRegistration`, :class:`ErrorCodeRegistration`), which the core reads by field
name. Positional and keyword calls both work; a call that does not fit is a
:class:`RegisterMisuse` the plugin layer reports naming the plugin, never a silent
mis-registration.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Iterable, Protocol, TypeVar

if TYPE_CHECKING:
    from loopx.seam.capabilities import Capability

class _Record:
    """A value: its fields are its ``__slots__``, set once by its ``__init__``; equal (and hashed) by
    them, never changed. Plain classes, not attrs: every command builds a plugin manager, so these
    are created on the path of ``quota should-run``, where attrs' class creation (it compiles an
    ``__init__``, ``__eq__`` and ``__hash__`` per class) cost ~1.5 ms for the five; none of its other
    features is used here."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, *values: Any) -> None:
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is a record: its fields do not change")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is a record: its fields do not change")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self.__slots__, self._values()))
        return f"{type(self).__name__}({fields})"


if TYPE_CHECKING:  # only annotations name it: a Protocol class costs ~0.5 M instructions to make on every command

    class StoreFactory(Protocol):
        """What ``loopx_register_stores`` registers: ``factory(url, readonly)`` opens a store."""

        def __call__(self, url: str, readonly: bool = ..., /) -> Any: ...


class StoreRegistration(_Record):
    """``register(scheme, factory)``: a storage backend for URLs of ``scheme``."""

    __slots__ = ("scheme", "factory")
    scheme: str
    factory: StoreFactory

    def __init__(self, scheme: str, factory: StoreFactory) -> None:
        super().__init__(scheme, factory)


class ExecutorRegistration(_Record):
    """``register(name, provider)``: an executor provider (:class:`loopx.turn.executors.protocol.Executor`)."""

    __slots__ = ("name", "provider")
    name: str
    provider: Any

    def __init__(self, name: str, provider: Any) -> None:
        super().__init__(name, provider)


class CapabilityRegistration(_Record):
    """``register(declaration)``: a :class:`loopx.seam.capabilities.Capability` (or a dict of its fields)."""

    __slots__ = ("declaration",)
    declaration: Capability | dict[str, Any]

    def __init__(self, declaration: Capability | dict[str, Any]) -> None:
        super().__init__(declaration)


if TYPE_CHECKING:  # for the checker only: nothing to build on the path of every command
    #: An event kind's ``apply(tx, event)``; a repair kind's (``RepairSession.apply_event``, marked
    #: ``replays``) is called ``apply(tx, event, replay)``.
    EventApply = Callable[[Any, Any], None] | Callable[[Any, Any, Any], None]


class EventKindRegistration(_Record):
    """``register(name, apply, writers=("capability",), guard=None, formerly=())``: an event kind."""

    __slots__ = ("name", "apply", "writers", "guard", "formerly")
    name: str
    apply: EventApply
    writers: str | Iterable[str]
    guard: Callable[[Any, dict[str, Any]], None] | None
    formerly: str | Iterable[str]

    def __init__(self, name: str, apply: EventApply,
                 writers: str | Iterable[str] = ("capability",),
                 guard: Callable[[Any, dict[str, Any]], None] | None = None,
                 formerly: str | Iterable[str] = ()) -> None:
        super().__init__(name, apply, writers, guard, formerly)


class ErrorCodeRegistration(_Record):
    """``register(code, description="")``: a namespaced error code."""

    __slots__ = ("code", "description")
    code: str
    description: str

    def __init__(self, code: str, description: str = "") -> None:
        super().__init__(code, description)


class RegisterMisuse(TypeError):
    """A plugin called a hook's ``register`` with arguments its signature does not take."""


R = TypeVar("R")


class Registrar(Generic[R]):
    """The ``register`` object one register hook hands a plugin: each call makes one ``record``
    (the call's signature is the record's fields) and hands it to ``sink``."""

    record: ClassVar[type]
    shown: ClassVar[str]  # the signature as docs/plugins.md writes it

    def __init__(self, sink: Callable[[R], None]):
        self._sink = sink

    @property
    def __signature__(self) -> inspect.Signature:
        # What inspect.signature(register) shows: the record's fields as docs/plugins.md writes the
        # call (names and defaults; the annotations are the type checker's, on __call__).
        sig = inspect.signature(self.record)
        return sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty)

    def _add(self, *args: Any, **kwargs: Any) -> None:
        try:
            made = self.record(*args, **kwargs)
        except TypeError as exc:
            why = str(exc).split(") ", 1)[-1] if ") " in str(exc) else str(exc)
            raise RegisterMisuse(f"called {self.shown} wrongly: {why}") from None
        self._sink(made)

    if not TYPE_CHECKING:  # a type checker sees each subclass's own, annotated signature
        def __call__(self, *args, **kwargs):
            self._add(*args, **kwargs)


class StoreRegistrar(Registrar[StoreRegistration]):
    """``register(scheme, factory)`` of ``loopx_register_stores``."""

    record = StoreRegistration
    shown = "register(scheme, factory)"

    if TYPE_CHECKING:
        def __call__(self, scheme: str, factory: StoreFactory) -> None: ...


class ExecutorRegistrar(Registrar[ExecutorRegistration]):
    """``register(name, provider)`` of ``loopx_register_executors``."""

    record = ExecutorRegistration
    shown = "register(name, provider)"

    if TYPE_CHECKING:
        def __call__(self, name: str, provider: Any) -> None: ...


class CapabilityRegistrar(Registrar[CapabilityRegistration]):
    """``register(declaration)`` of ``loopx_register_capabilities``."""

    record = CapabilityRegistration
    shown = "register(declaration)"

    if TYPE_CHECKING:
        def __call__(self, declaration: Capability | dict[str, Any]) -> None: ...


class EventKindRegistrar(Registrar[EventKindRegistration]):
    """``register(name, apply, writers=("capability",), guard=None, formerly=())`` of ``loopx_register_event_kinds``."""

    record = EventKindRegistration
    shown = "register(name, apply, writers=('capability',), guard=None, formerly=())"

    if TYPE_CHECKING:
        def __call__(self, name: str, apply: EventApply, writers: str | Iterable[str] = ...,
                     guard: Callable[[Any, dict[str, Any]], None] | None = None,
                     formerly: str | Iterable[str] = ...) -> None: ...


class ErrorCodeRegistrar(Registrar[ErrorCodeRegistration]):
    """``register(code, description="")`` of ``loopx_register_error_codes``."""

    record = ErrorCodeRegistration
    shown = "register(code, description='')"

    if TYPE_CHECKING:
        def __call__(self, code: str, description: str = "") -> None: ...


#: The registrar each register hook hands a plugin.
REGISTRARS: dict[str, type[Registrar[Any]]] = {
    "loopx_register_stores": StoreRegistrar,
    "loopx_register_executors": ExecutorRegistrar,
    "loopx_register_capabilities": CapabilityRegistrar,
    "loopx_register_event_kinds": EventKindRegistrar,
    "loopx_register_error_codes": ErrorCodeRegistrar,
}

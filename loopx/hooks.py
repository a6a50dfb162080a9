"""The typed façade over ``pm.hook``: one method per hookspec, called through pluggy itself.

The core calls plugins only through :class:`Hooks` (``loopx.plugins.hooks()``). Each method
has the hookspec's parameters and a typed answer, and calls ``pm.hook.<name>(...)``: pluggy's
own calling, so a plugin's wrapper hooks (``@hookimpl(wrapper=True)``, and old-style
``hookwrapper=True``) see and may alter the answer, ``firstresult`` stops at the first answer
that is not ``None``, and ``tryfirst``/``trylast`` order the calls, all as pluggy documents.

Fault containment is installed where no caller can bypass it: when a plugin is registered
(:class:`ContainedPluginManager`), a stand-in holding each of its hook implementations wrapped
is registered in its place (pluggy's documented registration; no pluggy internal is changed). A plain
implementation that raises, runs past the call's deadline or returns the wrong type is named in
a warning on stderr (and in :data:`faults`) and answers ``None``, which pluggy leaves out; a
wrapper that raises or misbehaves is named and passes the answer through unchanged. A call that
must fail closed (a veto) raises :class:`HookFault` instead. What the call asks of each
implementation (deadline, type check, what to undo on a fault) travels in a context variable set
by the façade for the length of one call.
"""

from __future__ import annotations

import contextvars
import os
import sys
from _thread import allocate_lock as _allocate_lock
from typing import TYPE_CHECKING, Any, Callable, Generic, NamedTuple, TypeVar

import pluggy

if TYPE_CHECKING:
    from loopx.model import Event, Goal
    from loopx.plugin_register import (
        CapabilityRegistration, ErrorCodeRegistration, EventKindRegistration, ExecutorRegistration, Registrar,
        StoreRegistration,
    )

ENV_HOOK_TIMEOUT = "LOOPX_HOOK_TIMEOUT"
DEFAULT_HOOK_TIMEOUT = 2.0
#: Faults met in this process: ``[(plugin name, hook name, one-line message)]``.
faults: list[tuple[str, str, str]] = []


class HookFault(Exception):
    """One implementation of a hook failed: it raised, timed out, or returned the wrong type."""

    def __init__(self, plugin: str, hook: str, message: str):
        super().__init__(f"plugin {plugin!r} hook {hook} {message}")
        self.plugin, self.hook, self.message = plugin, hook, message


def report_fault(plugin: str, hook: str, message: str) -> None:
    """Name a failed hook implementation on stderr; the caller skips it (or fails closed)."""
    faults.append((plugin, hook, message))
    print(f"loopx: warning: plugin {plugin!r} {hook} {message}; skipped", file=sys.stderr)


def hook_timeout() -> float:
    """Seconds a contract hook may take (``LOOPX_HOOK_TIMEOUT``, default 2)."""
    try:
        value = float(os.environ.get(ENV_HOOK_TIMEOUT) or DEFAULT_HOOK_TIMEOUT)
    except ValueError:
        return DEFAULT_HOOK_TIMEOUT
    return value if value > 0 else DEFAULT_HOOK_TIMEOUT


class Answer(NamedTuple):
    """One implementation's answer to a hook, and the plugin that gave it."""

    plugin: str
    value: Any


R = TypeVar("R")


class Registration(NamedTuple, Generic[R]):
    """One call of a hook's registrar (:mod:`loopx.plugin_register`): the typed record it made
    (``item``: a :class:`~loopx.plugin_register.StoreRegistration`, ...), and who made it."""

    plugin: str
    builtin: bool
    item: R


# --- containment, installed at registration --------------------------------------------------


class _Call:
    """What one façade call asks of every implementation it reaches."""

    def __init__(self, hook: str, check=None, timeout: float | None = None, raise_faults: bool = False,
                 on_start: Callable[[str], None] | None = None, on_fault: Callable[[str], None] | None = None):
        self.hook, self.check, self.timeout, self.raise_faults = hook, check, timeout, raise_faults
        self.on_start, self.on_fault = on_start, on_fault
        self.answered: list[Answer] = []  # every plain implementation that worked, in call order
        self.put: list[Answer] = []  # answers a wrapper put in place, and which wrapper
        self.current: str | None = None  # the plugin whose implementation is running
        self.failed: HookFault | None = None  # the first fault of a call that fails closed


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("loopx_hook_call", default=None)


def _current(hook: str) -> _Call | None:
    call = _CALL.get()
    # A nested call of another hook (made directly through pm.hook) is not this call's business.
    return call if call is not None and call.hook == hook else None


def _fault(call: _Call | None, plugin: str, hook: str, message: str) -> None:
    if call is not None and call.on_fault is not None:
        call.on_fault(plugin)
    if call is not None and call.raise_faults:
        # Kept on the call too: a wrapper that swallows the fault does not turn it into a yes.
        call.failed = call.failed or HookFault(plugin, hook, message)
        raise call.failed
    report_fault(plugin, hook, message)


class _WrongType(Exception):
    pass


def _describe(exc: BaseException) -> str:
    from loopx.plugin_register import RegisterMisuse

    if isinstance(exc, TimeoutError):
        return f"timed out ({exc})"
    if isinstance(exc, _WrongType):
        return f"returned the wrong type: {exc}"
    if isinstance(exc, RegisterMisuse):
        return str(exc)
    return f"failed: {type(exc).__name__}: {exc}"


def _run(fn, args, kwargs, timeout: float | None, plugin: str):
    if timeout is None:
        return fn(*args, **kwargs)
    return _Job(fn, args, kwargs).wait(timeout, plugin)


class _Job:
    """One implementation run with a deadline, on a worker thread (:class:`_Worker`).

    The caller waits for it at most ``timeout``; a job not finished by then is abandoned with its
    thread (which never serves again). Which of the two happened is decided under ``_POOL``'s
    lock, so a job that ends just as its caller gives up is either taken (finished) or abandoned
    (its thread leaves), never half of each.
    """

    __slots__ = ("fn", "args", "kwargs", "context", "done", "value", "error", "finished", "abandoned")

    def __init__(self, fn, args, kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.context = contextvars.copy_context()  # the caller's context variables, as a thread of its own had
        self.done = _allocate_lock()
        self.done.acquire()  # released by the worker when the job has run
        self.value = self.error = None
        self.finished = self.abandoned = False

    def run(self) -> None:
        try:
            self.value = self.context.run(self.fn, *self.args, **self.kwargs)
        except BaseException as exc:  # raised again in the caller's thread
            self.error = exc

    def wait(self, timeout: float, plugin: str):
        worker = _Worker.take()
        worker.thread.name = f"loopx-hook-{plugin}"  # what a stack dump of a stuck hook shows
        worker.jobs.put(self)
        if not self.done.acquire(timeout=timeout):
            with _POOL_LOCK:
                if not self.finished:
                    # A hook that never returns is abandoned with its thread, never waited for.
                    self.abandoned = True
                    raise TimeoutError(f"took longer than {timeout:g}s")
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.value


class _Worker:
    """A daemon thread that runs hook implementations for callers waiting with a deadline.

    Reused across calls (a thread started per call cost about as much as a small hook itself, on
    every turn and every write that asks a contract hook): an idle worker waits in ``_POOL``;
    a caller takes one (or starts one when all are busy: nested or concurrent calls), hands it
    the job and waits. A worker whose job was abandoned ends with it (if it ever returns).
    """

    __slots__ = ("jobs", "thread")

    def __init__(self):
        import queue
        import threading

        self.jobs = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="loopx-hook", daemon=True)
        self.thread.start()

    @classmethod
    def take(cls) -> "_Worker":
        with _POOL_LOCK:
            if _POOL:
                return _POOL.pop()
        return cls()

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            job.run()
            with _POOL_LOCK:
                if job.abandoned:
                    return  # its caller went on without it: this thread is done
                job.finished = True
                _POOL.append(self)
            job.done.release()
            job = None  # nothing of the call kept alive while idle


_POOL: list[_Worker] = []  # idle workers
_POOL_LOCK = _allocate_lock()


def _forget_workers() -> None:
    # A forked child has none of its parent's threads: the workers in the pool are not there.
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = _allocate_lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_workers)


def _contain_plain(fn, plugin: str, hook: str):
    def contained(*args, **kwargs):
        call = _current(hook)
        try:
            if call is not None:
                call.current = plugin
                if call.on_start is not None:
                    call.on_start(plugin)
            result = _run(fn, args, kwargs, call.timeout if call else None, plugin)
            problem = call.check(result) if call is not None and call.check is not None else None
            if problem:
                raise _WrongType(problem)
        except HookFault:
            raise  # a fail-closed call below this one: already named
        except Exception as exc:
            _fault(call, plugin, hook, _describe(exc))
            return None  # pluggy leaves None out of the answers
        if call is not None:
            call.answered.append(Answer(plugin, result))
        return result

    return contained


def _contain_wrapper(fn, plugin: str, hook: str):
    # A generator in front of the plugin's: whatever the plugin's own code raises (before or after
    # its yield) is named, and the answer it was given passes through unchanged. What the inner
    # call raised is handed to the plugin, which may answer instead; if it does not, it goes on up.
    def contained(*args, **kwargs):
        call = _current(hook)
        try:
            gen = fn(*args, **kwargs)
            next(gen)
        except StopIteration:
            _fault(call, plugin, hook, "failed: its wrapper did not yield")
            return (yield)
        except HookFault:
            raise
        except Exception as exc:
            _fault(call, plugin, hook, _describe(exc))
            return (yield)
        try:
            received = yield
        except BaseException as inner:
            try:
                gen.throw(inner)
            except StopIteration as stop:
                return stop.value
            except BaseException as again:
                if again is inner or isinstance(again, HookFault) or not isinstance(again, Exception):
                    raise
                _fault(call, plugin, hook, _describe(again))
                raise inner from None
            gen.close()
            _fault(call, plugin, hook, "failed: its wrapper yielded twice")
            raise
        try:
            gen.send(received)
        except StopIteration as stop:
            if call is not None and stop.value is not received:
                _note_put(call, plugin, received, stop.value)
            return stop.value
        except HookFault:
            raise
        except Exception as exc:
            _fault(call, plugin, hook, _describe(exc))
            return received
        gen.close()
        _fault(call, plugin, hook, "failed: its wrapper yielded twice")
        return received

    return contained


def _note_put(call: _Call, plugin: str, before, after) -> None:
    """Remember which answers in ``after`` the wrapper ``plugin`` put there (not in ``before``)."""
    old = before if isinstance(before, list) else [before]
    for value in after if isinstance(after, list) else [after]:
        if value is not None and not any(value is o for o in old):
            call.put.append(Answer(plugin, value))


class _Contained:
    """What is registered in ``plugin``'s place: an object holding each of its hook implementations,
    contained (:func:`_contain_plain`, :func:`_contain_wrapper`), under the same attribute name
    and with the same hookimpl options, so pluggy finds, orders and calls them as documented."""

    def __init__(self, plugin: object):
        self.__dict__["_loopx_plugin"] = plugin

    def __repr__(self) -> str:
        return repr(self._loopx_plugin)  # what pluggy's own messages (check_pending) show

    def __dir__(self) -> list[str]:
        # Only the hook implementations: pluggy looks at every name dir() gives, and an object's
        # inherited dunders cost it as much again as the plugin's own names (every process start).
        return [name for name in self.__dict__ if name != "_loopx_plugin"]


def stand_in(pm: pluggy.PluginManager, plugin: object, plugin_name: str) -> _Contained:
    """A stand-in for ``plugin`` whose every hook implementation is contained.

    The implementations are found with the manager's own ``parse_hookimpl_opts`` (pluggy's
    documented way to tell which attributes implement hooks) and bound with ``getattr``, as
    pluggy binds them. Each wrapper keeps the implementation's signature (``__wrapped__``, which
    pluggy reads for the argument names) and carries a copy of its options.
    """
    import functools

    proxy = _Contained(plugin)
    marker = pm.project_name + "_impl"
    for attr in dir(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        fn = getattr(plugin, attr)
        hook = opts.get("specname") or attr
        wrap = _contain_wrapper if (opts.get("wrapper") or opts.get("hookwrapper")) else _contain_plain
        inner = wrap(fn, plugin_name, hook)
        functools.update_wrapper(inner, fn)  # name, docstring, signature (through __wrapped__)
        setattr(inner, marker, dict(opts))
        proxy.__dict__[attr] = inner
    return proxy


class ContainedPluginManager(pluggy.PluginManager):
    """A pluggy plugin manager whose every registered hook implementation is contained.

    :meth:`register` registers a stand-in (:func:`stand_in`) in the plugin's place; every
    public method that takes or hands back a plugin translates between the two, so callers see
    the plugin object they registered (``get_plugin``, ``list_name_plugin``, ``unregister(plugin)``,
    ``subset_hook_caller``...). Nothing of pluggy's internals is touched.
    """

    #: Moves on with every plugin registered or unregistered: what is derived from the set of
    #: plugins (the capability declarations, asked several times a write) is keyed on it.
    generation = 0

    def __init__(self, project_name: str):
        super().__init__(project_name)
        self._stand_ins: dict[int, _Contained] = {}  # id(plugin) -> its stand-in, while registered

    def _in(self, plugin):
        return self._stand_ins.get(id(plugin), plugin) if plugin is not None else None

    @staticmethod
    def _out(plugin):
        return plugin._loopx_plugin if isinstance(plugin, _Contained) else plugin

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register ``plugin`` as pluggy does, its hook implementations contained."""
        if plugin is None:
            return None
        if self.is_registered(plugin):
            raise ValueError(f"Plugin already registered: {plugin!r}")
        plugin_name = name or self.get_canonical_name(plugin)
        proxy = stand_in(self, plugin, plugin_name)
        registered = super().register(proxy, plugin_name)
        self.generation += 1
        if registered is not None:
            self._stand_ins[id(plugin)] = proxy
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None):
        """Unregister as pluggy does (also what ``set_blocked`` does); answers the plugin registered."""
        self.generation += 1
        try:
            if name is None:
                assert plugin is not None, "one of name or plugin needs to be specified"
                name = self.get_name(plugin)
                assert name is not None, "plugin is not registered"
            proxy = super().get_plugin(name)
            if plugin is not None and proxy is not None and self._in(plugin) is not proxy:
                raise ValueError(f"Plugin name {name!r} and plugin {plugin!r} do not agree")
            if proxy is None:
                return None
            super().unregister(proxy, name)
            original = self._out(proxy)
            self._stand_ins.pop(id(original), None)
            return original
        finally:
            self.generation += 1

    def is_registered(self, plugin: object) -> bool:
        """Whether ``plugin`` is registered."""
        return super().is_registered(self._in(plugin))

    def get_name(self, plugin: object) -> str | None:
        """The name ``plugin`` is registered under, or ``None``."""
        return super().get_name(self._in(plugin))

    def get_plugin(self, name: str):
        """The plugin registered under ``name``, or ``None``."""
        return self._out(super().get_plugin(name))

    def get_plugins(self) -> set:
        """Every registered plugin."""
        return {self._out(p) for p in super().get_plugins()}

    def list_name_plugin(self) -> list:
        """``[(name, plugin)]`` of every registration (``None`` for a blocked name)."""
        return [(n, self._out(p)) for n, p in super().list_name_plugin()]

    def get_hookcallers(self, plugin: object):
        """The hook callers ``plugin`` implements, or ``None`` if it is not registered."""
        return super().get_hookcallers(self._in(plugin))

    def subset_hook_caller(self, name: str, remove_plugins):
        """A caller of hook ``name`` that leaves out ``remove_plugins``."""
        return super().subset_hook_caller(name, [self._in(p) for p in remove_plugins])


# --- the façade ----------------------------------------------------------------------------------


class Hooks:
    """One method per hookspec in :mod:`loopx.hookspecs`, each calling ``pm.hook.<spec>(...)``.

    A method is named for its hookspec without the ``loopx_`` prefix. Answers carry the plugin
    that gave them (:class:`Answer`); an answer a wrapper put in place of the implementations'
    is credited to the wrapper plugin(s) and checked like theirs.
    """

    def __init__(self, pm: pluggy.PluginManager, builtins: tuple = ()):
        self._pm, self._builtins = pm, frozenset(builtins)

    # -- plumbing

    def _caller(self, hook: str):
        return getattr(self._pm.hook, hook)

    def _without(self, hook: str, skip) -> object | None:
        """A caller of ``hook`` that leaves out the plugins named in ``skip`` (capabilities that do
        not serve the goal at hand, :mod:`loopx.capability_goals`), or ``None`` for all of them."""
        gone = [p for p in (self._pm.get_plugin(name) for name in skip or ()) if p is not None]
        return self._pm.subset_hook_caller(hook, gone) if gone else None

    def implemented(self, method: Callable) -> bool:
        """Whether any plugin implements the hook behind ``method`` (``h.implemented(h.contract_veto)``)."""
        return bool(self._caller("loopx_" + method.__name__).get_hookimpls())

    def _wrappers(self, hook: str) -> str:
        names = [i.plugin_name for i in self._caller(hook).get_hookimpls() if i.wrapper or i.hookwrapper]
        return ",".join(names) or "?"

    def _invoke(self, hook: str, kwargs: dict, call: _Call, caller=None):
        token = _CALL.set(call)
        try:
            return (caller or self._caller(hook))(**kwargs)
        except HookFault:
            raise
        except Exception as exc:
            # Every implementation is contained, so this is pluggy refusing a call or a wrapper
            # escaping containment: name the wrappers and keep what the implementations answered.
            _fault(call, self._wrappers(hook), hook, _describe(exc))
            return [a.value for a in call.answered]
        finally:
            _CALL.reset(token)

    def _blame(self, hook: str, call: _Call, value) -> str:
        """The wrapper that put ``value`` in place (or every wrapper of ``hook``, when unsure)."""
        return next((a.plugin for a in call.put if a.value is value), None) or self._wrappers(hook)

    def _credit(self, hook: str, call: _Call, values: list) -> list[Answer]:
        """``values`` (pluggy's answer, wrappers included) with the plugin of each; an answer no
        implementation gave is a wrapper's, checked and named like any other."""
        left = list(call.answered)
        out = []
        for value in values:
            found = next((i for i, a in enumerate(left) if a.value is value), None)
            if found is not None:
                out.append(left.pop(found))
                continue
            plugin = self._blame(hook, call, value)
            problem = call.check(value) if call.check is not None else None
            if problem:
                _fault(call, plugin, hook, f"returned the wrong type: {problem}")
                continue
            out.append(Answer(plugin, value))
        return out

    def _collect(self, hook: str, *, check=None, timeout=None, skip=(), **kwargs) -> list[Answer]:
        call = _Call(hook, check=check, timeout=timeout)
        values = self._invoke(hook, kwargs, call, self._without(hook, skip))
        if not isinstance(values, list):  # only a wrapper can make it so
            _fault(call, self._blame(hook, call, values), hook,
                   f"returned the wrong type: a list of answers, not {type(values).__name__}")
            values = [a.value for a in call.answered]
        return self._credit(hook, call, values)

    def _registrations(self, hook: str, registrar: type[Registrar[R]]) -> list[Registration[R]]:
        made: dict[str, list[R]] = {}
        call = _Call(hook, on_fault=lambda plugin: made.pop(plugin, None))  # half done: none count

        def sink(item: R) -> None:
            made.setdefault(call.current or "?", []).append(item)

        self._invoke(hook, {"register": registrar(sink)}, call)
        return [Registration(a.plugin, a.plugin in self._builtins, item)
                for a in call.answered for item in made.pop(a.plugin, [])]

    # -- state (loopx/hookspecs/state.py)

    def register_stores(self) -> list[Registration[StoreRegistration]]:
        """``loopx_register_stores(register)`` (:func:`loopx.hookspecs.state.loopx_register_stores`):
        a :class:`~loopx.plugin_register.StoreRegistration` per call, in call order."""
        from loopx.plugin_register import StoreRegistrar

        return self._registrations("loopx_register_stores", StoreRegistrar)

    def event_committed(self, registry, events: list[Event], *, skip=()) -> None:
        """``loopx_event_committed(registry, events)`` (:func:`loopx.hookspecs.state.loopx_event_committed`):
        tell observers about committed events; never raises. ``skip``: plugin names not to tell."""
        self._collect("loopx_event_committed", skip=skip, registry=registry, events=events)

    def gate_decided(self, writer, gate, decision: str, *, skip=()) -> None:
        """``loopx_gate_decided(writer, gate, decision)`` (:func:`loopx.hookspecs.state.loopx_gate_decided`),
        inside the decision's transaction, in the caller's thread. Fails closed: any fault raises
        :class:`HookFault` naming the plugin (the caller refuses the decision). ``skip``: plugin
        names not to ask."""
        hook = "loopx_gate_decided"
        call = _Call(hook, raise_faults=True)
        self._invoke(hook, {"writer": writer, "gate": gate, "decision": decision}, call, self._without(hook, skip))
        if call.failed is not None:
            raise call.failed

    # -- contracts (loopx/hookspecs/contracts.py)

    def contract_veto(self, tx, goal: Goal, *, check=None, skip=()) -> Answer | None:
        """``loopx_contract_veto(tx, goal)`` (:func:`loopx.hookspecs.contracts.loopx_contract_veto`),
        ``firstresult``: the first veto and its plugin, or ``None``.

        Fails closed: an implementation (or wrapper) that raises, runs past :func:`hook_timeout`
        or answers something ``check`` refuses raises :class:`HookFault` naming its plugin, even
        when a wrapper caught the fault and answered instead. ``skip``: plugin names not to ask.
        """
        hook = "loopx_contract_veto"
        call = _Call(hook, check=check, timeout=hook_timeout(), raise_faults=True)
        value = self._invoke(hook, {"tx": tx, "goal": goal}, call, self._without(hook, skip))
        if call.failed is not None:
            raise call.failed
        if value is None:
            return None
        return self._credit(hook, call, [value])[0]

    def contract_actions(self, tx, goal: Goal, run_id: str, remaining: dict | None, *,
                         check=None, skip=()) -> list[Answer]:
        """``loopx_contract_actions(tx, goal, run_id, remaining)``
        (:func:`loopx.hookspecs.contracts.loopx_contract_actions`): each plugin's list of
        actions, under :func:`hook_timeout`; one that fails or answers what ``check`` refuses is
        named and skipped. ``skip``: plugin names not to ask."""
        return self._collect("loopx_contract_actions", check=check, timeout=hook_timeout(), skip=skip, tx=tx, goal=goal,
                             run_id=run_id, remaining=remaining)

    # -- executors (loopx/hookspecs/executors.py)

    def register_executors(self) -> list[Registration[ExecutorRegistration]]:
        """``loopx_register_executors(register)`` (:func:`loopx.hookspecs.executors.loopx_register_executors`):
        an :class:`~loopx.plugin_register.ExecutorRegistration` per call, in call order."""
        from loopx.plugin_register import ExecutorRegistrar

        return self._registrations("loopx_register_executors", ExecutorRegistrar)

    # -- capabilities (loopx/hookspecs/capabilities.py)

    def register_capabilities(self) -> list[Registration[CapabilityRegistration]]:
        """``loopx_register_capabilities(register)``
        (:func:`loopx.hookspecs.capabilities.loopx_register_capabilities`): a :class:`~loopx.plugin_register.CapabilityRegistration` per call."""
        from loopx.plugin_register import CapabilityRegistrar

        return self._registrations("loopx_register_capabilities", CapabilityRegistrar)

    # -- commands (loopx/hookspecs/commands.py)

    def register_commands(self, cli, *, only: object | None = None) -> None:
        """``loopx_register_commands(cli)`` (:func:`loopx.hookspecs.commands.loopx_register_commands`):
        a plugin whose hook raises adds no commands (what it added before raising is removed).
        ``only``: ask that one registered plugin alone (one registered after the CLI asked the rest)."""
        before: dict = {}

        def start(plugin):
            before.clear()
            before.update(cli.commands)

        def undo(plugin):
            cli.commands.clear()
            cli.commands.update(before)

        hook = "loopx_register_commands"
        caller = None
        if only is not None:
            others = [p for _, p in self._pm.list_name_plugin() if p is not only and p is not None]
            caller = self._pm.subset_hook_caller(hook, others)
        self._invoke(hook, {"cli": cli}, _Call(hook, on_start=start, on_fault=undo), caller)

    # -- vocabulary (loopx/hookspecs/vocabulary.py)

    def register_event_kinds(self) -> list[Registration[EventKindRegistration]]:
        """``loopx_register_event_kinds(register)``
        (:func:`loopx.hookspecs.vocabulary.loopx_register_event_kinds`): an :class:`~loopx.plugin_register.EventKindRegistration` per call."""
        from loopx.plugin_register import EventKindRegistrar

        return self._registrations("loopx_register_event_kinds", EventKindRegistrar)

    def register_error_codes(self) -> list[Registration[ErrorCodeRegistration]]:
        """``loopx_register_error_codes(register)``
        (:func:`loopx.hookspecs.vocabulary.loopx_register_error_codes`): an
        :class:`~loopx.plugin_register.ErrorCodeRegistration` per call."""
        from loopx.plugin_register import ErrorCodeRegistrar

        return self._registrations("loopx_register_error_codes", ErrorCodeRegistrar)

    # -- people (loopx/hookspecs/notify.py)

    def notify(self, notification: dict, *, timeout: float | None = None) -> list[Answer]:
        """``loopx_notify(notification)`` (:func:`loopx.hookspecs.notify.loopx_notify`): each
        plugin's answer (``True`` when delivered), each under ``timeout``."""
        return self._collect("loopx_notify", timeout=timeout, notification=notification)

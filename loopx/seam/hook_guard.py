"""Fault containment for plugin hook implementations, installed where no caller can bypass it.

When a plugin is registered (:class:`ContainedPluginManager`), a stand-in holding each of its
hook implementations wrapped is registered in its place (pluggy's documented registration; no
pluggy internal is changed). A plain implementation that raises, runs past the call's deadline
or returns the wrong type is named in a warning on stderr (and in :data:`faults`) and answers
``None``, which pluggy leaves out; a wrapper that raises or misbehaves is named and passes the
answer through unchanged. A call that must fail closed (a veto) raises :class:`HookFault`
instead. What the call asks of each implementation (deadline, type check, what to undo on a
fault) travels in a context variable (:data:`CURRENT_CALL`) set by the façade
(:mod:`loopx.seam.hooks`) for the length of one call.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import types
from typing import Any, Callable, Generator, Iterable, NamedTuple

import pluggy

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



# --- containment, installed at registration --------------------------------------------------


#: A check of one answer: what is wrong with it (one line), or ``None`` when it is fine.
Check = Callable[[Any], "str | None"]
#: An implementation as pluggy calls it.
Impl = Callable[..., Any]


class Call:
    """What one façade call asks of every implementation it reaches."""

    def __init__(self, hook: str, check: Check | None = None, timeout: float | None = None, raise_faults: bool = False,
                 on_start: Callable[[str], None] | None = None, on_fault: Callable[[str], None] | None = None) -> None:
        self.hook, self.check, self.timeout, self.raise_faults = hook, check, timeout, raise_faults
        self.on_start, self.on_fault = on_start, on_fault
        self.answered: list[Answer] = []  # every plain implementation that worked, in call order
        self.put: list[Answer] = []  # answers a wrapper put in place, and which wrapper
        self.current: str | None = None  # the plugin whose implementation is running
        self.failed: HookFault | None = None  # the first fault of a call that fails closed


CURRENT_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("loopx_hook_call", default=None)


def _current(hook: str) -> Call | None:
    call = CURRENT_CALL.get()
    # A nested call of another hook (made directly through the manager) is not this call's business.
    return call if call is not None and call.hook == hook else None


def name_fault(call: Call | None, plugin: str, hook: str, message: str) -> None:
    if call is not None and call.on_fault is not None:
        call.on_fault(plugin)
    if call is not None and call.raise_faults:
        # Kept on the call too: a wrapper that swallows the fault does not turn it into a yes.
        call.failed = call.failed or HookFault(plugin, hook, message)
        raise call.failed
    report_fault(plugin, hook, message)


class _WrongType(Exception):
    pass


def describe(exc: BaseException) -> str:
    from loopx.seam.plugin_register import RegisterMisuse

    if isinstance(exc, TimeoutError):
        return f"timed out ({exc})"
    if isinstance(exc, _WrongType):
        return f"returned the wrong type: {exc}"
    if isinstance(exc, RegisterMisuse):
        return str(exc)
    return f"failed: {type(exc).__name__}: {exc}"


def _run(fn: Impl, args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None, plugin: str) -> Any:
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

    def __init__(self, fn: Impl, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.context = contextvars.copy_context()  # the caller's context variables, as a thread of its own had
        self.done = threading.Lock()
        self.done.acquire()  # released by the worker when the job has run
        self.value: Any = None
        self.error: BaseException | None = None
        self.finished = self.abandoned = False

    def run(self) -> None:
        try:
            self.value = self.context.run(self.fn, *self.args, **self.kwargs)
        except BaseException as exc:  # raised again in the caller's thread
            self.error = exc

    def wait(self, timeout: float, plugin: str) -> Any:
        worker = _Worker.take()
        worker.thread.name = f"loopx-hook-{plugin}"  # what a stack dump of a stuck hook shows
        worker.put(self)
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

    __slots__ = ("job", "wake", "thread")

    def __init__(self) -> None:
        # A worker holds at most one job (it is out of the pool from take() until that job has
        # run), so the hand-off is one slot and a lock released when it is filled, not a queue.
        self.job: _Job | None = None
        self.wake = threading.Lock()
        self.wake.acquire()
        self.thread = threading.Thread(target=self._serve, name="loopx-hook", daemon=True)
        self.thread.start()

    def put(self, job: _Job) -> None:
        """Hand this (idle, taken) worker its job."""
        self.job = job
        self.wake.release()

    @classmethod
    def take(cls) -> "_Worker":
        with _POOL_LOCK:
            if _POOL:
                return _POOL.pop()
        return cls()

    def _serve(self) -> None:
        job: _Job | None
        while True:
            self.wake.acquire()
            job, self.job = self.job, None
            assert job is not None
            job.run()
            with _POOL_LOCK:
                if job.abandoned:
                    return  # its caller went on without it: this thread is done
                job.finished = True
                _POOL.append(self)
            job.done.release()
            job = None  # nothing of the call kept alive while idle


_POOL: list[_Worker] = []  # idle workers
_POOL_LOCK = threading.Lock()


def _forget_workers() -> None:
    # A forked child has none of its parent's threads: the workers in the pool are not there.
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_workers)


def _contain_plain(fn: Impl, plugin: str, hook: str) -> Impl:
    def contained(*args: Any, **kwargs: Any) -> Any:
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
            name_fault(call, plugin, hook, describe(exc))
            return None  # pluggy leaves None out of the answers
        if call is not None:
            call.answered.append(Answer(plugin, result))
        return result

    return contained


def _contain_wrapper(fn: Callable[..., Generator[None, Any, Any]], plugin: str, hook: str) -> Impl:
    # A generator in front of the plugin's: whatever the plugin's own code raises (before or after
    # its yield) is named, and the answer it was given passes through unchanged. What the inner
    # call raised is handed to the plugin, which may answer instead; if it does not, it goes on up.
    def contained(*args: Any, **kwargs: Any) -> Generator[None, Any, Any]:
        call = _current(hook)
        try:
            gen = fn(*args, **kwargs)
            next(gen)
        except StopIteration:
            name_fault(call, plugin, hook, "failed: its wrapper did not yield")
            return (yield)
        except HookFault:
            raise
        except Exception as exc:
            name_fault(call, plugin, hook, describe(exc))
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
                name_fault(call, plugin, hook, describe(again))
                raise inner from None
            gen.close()
            name_fault(call, plugin, hook, "failed: its wrapper yielded twice")
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
            name_fault(call, plugin, hook, describe(exc))
            return received
        gen.close()
        name_fault(call, plugin, hook, "failed: its wrapper yielded twice")
        return received

    return contained


def _note_put(call: Call, plugin: str, before: object, after: object) -> None:
    """Remember which answers in ``after`` the wrapper ``plugin`` put there (not in ``before``)."""
    old = before if isinstance(before, list) else [before]
    for value in after if isinstance(after, list) else [after]:
        if value is not None and not any(value is o for o in old):
            call.put.append(Answer(plugin, value))


class _Contained:
    """What is registered in ``plugin``'s place: an object holding each of its hook implementations,
    contained (:func:`_contain_plain`, :func:`_contain_wrapper`), under the same attribute name
    and with the same hookimpl options, so pluggy finds, orders and calls them as documented."""

    def __init__(self, plugin: object) -> None:
        self.__dict__["_loopx_plugin"] = plugin

    def __repr__(self) -> str:
        return repr(_original(self))  # what pluggy's own messages (check_pending) show

    def __dir__(self) -> list[str]:
        # Only the hook implementations: pluggy looks at every name dir() gives, and an object's
        # inherited dunders cost it as much again as the plugin's own names (every process start).
        return [name for name in self.__dict__ if name != "_loopx_plugin"]


#: What pluggy can take as a hook implementation (``_static_hook_attr``); any other name of a
#: module plugin is none, so :func:`stand_in` does not ask pluggy about it.
_HOOKABLE = (types.FunctionType, staticmethod, classmethod, types.MethodType)


def _original(proxy: _Contained) -> object:
    """The plugin ``proxy`` stands in for (kept in its __dict__: no attribute a hook name could shadow)."""
    return proxy.__dict__["_loopx_plugin"]


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
    names = dir(plugin)
    if isinstance(plugin, types.ModuleType):
        # pluggy looks each name up with inspect.getattr_static; a module's own dict tells at once
        # which names can be hooks at all (its imports, constants and classes cannot).
        own = vars(plugin)
        names = [name for name in names if isinstance(own.get(name), _HOOKABLE)]
    for attr in names:
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

    def _in(self, plugin: object) -> Any:
        return self._stand_ins.get(id(plugin), plugin) if plugin is not None else None

    @staticmethod
    def _out(plugin: object) -> Any:
        return _original(plugin) if isinstance(plugin, _Contained) else plugin

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

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
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

    def get_plugin(self, name: str) -> Any:
        """The plugin registered under ``name``, or ``None``."""
        return self._out(super().get_plugin(name))

    def get_plugins(self) -> set[Any]:
        """Every registered plugin."""
        return {self._out(p) for p in super().get_plugins()}

    def list_name_plugin(self) -> list[tuple[str, Any]]:
        """``[(name, plugin)]`` of every registration (``None`` for a blocked name)."""
        return [(n, self._out(p)) for n, p in super().list_name_plugin()]

    def get_hookcallers(self, plugin: object) -> list[pluggy.HookCaller] | None:
        """The hook callers ``plugin`` implements, or ``None`` if it is not registered."""
        return super().get_hookcallers(self._in(plugin))

    def subset_hook_caller(self, name: str, remove_plugins: Iterable[object]) -> pluggy.HookCaller:
        """A caller of hook ``name`` that leaves out ``remove_plugins``."""
        return super().subset_hook_caller(name, [self._in(p) for p in remove_plugins])

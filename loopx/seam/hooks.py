"""The typed façade over ``pm.hook``: one method per hookspec, called through pluggy itself.

The core calls plugins only through :class:`Hooks` (``loopx.seam.plugins.hooks()``). Each method
has the hookspec's parameters and a typed answer, and calls ``pm.hook.<name>(...)``: pluggy's
own calling, so a plugin's wrapper hooks (``@hookimpl(wrapper=True)``, and old-style
``hookwrapper=True``) see and may alter the answer, ``firstresult`` stops at the first answer
that is not ``None``, and ``tryfirst``/``trylast`` order the calls, all as pluggy documents.

Fault containment is installed when a plugin is registered (:mod:`loopx.seam.hook_guard`, whose
names stay importable from here): a plain implementation that raises, runs past the call's
deadline or returns the wrong type is named and skipped; a call that must fail closed (a veto)
raises :class:`HookFault` instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, NamedTuple, TypeVar

import pluggy

# The fault vocabulary, importable from here as before (``as`` re-exports, for a type checker).
from loopx.seam.hook_guard import CURRENT_CALL, Call, Check, describe, name_fault
from loopx.seam.hook_guard import DEFAULT_HOOK_TIMEOUT as DEFAULT_HOOK_TIMEOUT
from loopx.seam.hook_guard import ENV_HOOK_TIMEOUT as ENV_HOOK_TIMEOUT
from loopx.seam.hook_guard import Answer as Answer
from loopx.seam.hook_guard import ContainedPluginManager as ContainedPluginManager
from loopx.seam.hook_guard import HookFault as HookFault
from loopx.seam.hook_guard import faults as faults
from loopx.seam.hook_guard import hook_timeout as hook_timeout
from loopx.seam.hook_guard import report_fault as report_fault
from loopx.seam.hook_guard import stand_in as stand_in

if TYPE_CHECKING:
    import click

    from loopx.seam.hookspecs.answers import ReadTx
    from loopx.model import Event, Gate, Goal
    from loopx.ledger.registry import Registry
    from loopx.ledger.writer import Writer
    from loopx.seam.plugin_register import (
        CapabilityRegistration, ErrorCodeRegistration, EventKindRegistration, ExecutorRegistration, Registrar,
        StoreRegistration,
    )

R = TypeVar("R")


class Registration(NamedTuple, Generic[R]):
    """One call of a hook's registrar (:mod:`loopx.seam.plugin_register`): the typed record it made
    (``item``: a :class:`~loopx.seam.plugin_register.StoreRegistration`, ...), and who made it."""

    plugin: str
    builtin: bool
    item: R


# --- the façade ----------------------------------------------------------------------------------


class Hooks:
    """One method per hookspec in :mod:`loopx.seam.hookspecs`, each calling ``pm.hook.<spec>(...)``.

    A method is named for its hookspec without the ``loopx_`` prefix. Answers carry the plugin
    that gave them (:class:`Answer`); an answer a wrapper put in place of the implementations'
    is credited to the wrapper plugin(s) and checked like theirs.
    """

    def __init__(self, pm: pluggy.PluginManager, builtins: Iterable[str] = ()) -> None:
        self._pm, self._builtins = pm, frozenset(builtins)

    # -- plumbing

    def _caller(self, hook: str) -> pluggy.HookCaller:
        caller: pluggy.HookCaller = getattr(self._pm.hook, hook)
        return caller

    def _without(self, hook: str, skip: Iterable[str] | None) -> pluggy.HookCaller | None:
        """A caller of ``hook`` that leaves out the plugins named in ``skip`` (capabilities that do
        not serve the goal at hand, :mod:`loopx.seam.capability_goals`), or ``None`` for all of them."""
        gone = [p for p in (self._pm.get_plugin(name) for name in skip or ()) if p is not None]
        return self._pm.subset_hook_caller(hook, gone) if gone else None

    def implemented(self, method: Callable[..., Any]) -> bool:
        """Whether any plugin implements the hook behind ``method`` (``h.implemented(h.contract_veto)``)."""
        return bool(self._caller("loopx_" + method.__name__).get_hookimpls())

    def _wrappers(self, hook: str) -> str:
        names = [i.plugin_name for i in self._caller(hook).get_hookimpls() if i.wrapper or i.hookwrapper]
        return ",".join(names) or "?"

    def _invoke(self, hook: str, kwargs: dict[str, Any], call: Call, caller: pluggy.HookCaller | None = None) -> Any:
        token = CURRENT_CALL.set(call)
        try:
            return (caller or self._caller(hook))(**kwargs)
        except HookFault:
            raise
        except Exception as exc:
            # Every implementation is contained, so this is pluggy refusing a call or a wrapper
            # escaping containment: name the wrappers and keep what the implementations answered.
            name_fault(call, self._wrappers(hook), hook, describe(exc))
            return [a.value for a in call.answered]
        finally:
            CURRENT_CALL.reset(token)

    def _blame(self, hook: str, call: Call, value: object) -> str:
        """The wrapper that put ``value`` in place (or every wrapper of ``hook``, when unsure)."""
        return next((a.plugin for a in call.put if a.value is value), None) or self._wrappers(hook)

    def _credit(self, hook: str, call: Call, values: list[Any]) -> list[Answer]:
        """``values`` (pluggy's answer, wrappers included) with the plugin of each; an answer no
        implementation gave is a wrapper's, checked and named like any other."""
        left = list(call.answered)
        out: list[Answer] = []
        for value in values:
            found = next((i for i, a in enumerate(left) if a.value is value), None)
            if found is not None:
                out.append(left.pop(found))
                continue
            plugin = self._blame(hook, call, value)
            problem = call.check(value) if call.check is not None else None
            if problem:
                name_fault(call, plugin, hook, f"returned the wrong type: {problem}")
                continue
            out.append(Answer(plugin, value))
        return out

    def _collect(self, hook: str, *, check: Check | None = None, timeout: float | None = None,
                 skip: Iterable[str] | None = (), **kwargs: Any) -> list[Answer]:
        call = Call(hook, check=check, timeout=timeout)
        values = self._invoke(hook, kwargs, call, self._without(hook, skip))
        if not isinstance(values, list):  # only a wrapper can make it so
            name_fault(call, self._blame(hook, call, values), hook,
                       f"returned the wrong type: a list of answers, not {type(values).__name__}")
            values = [a.value for a in call.answered]
        return self._credit(hook, call, values)

    def _registrations(self, hook: str, registrar: type[Registrar[R]]) -> list[Registration[R]]:
        made: dict[str, list[R]] = {}

        def forget(plugin: str) -> None:
            made.pop(plugin, None)  # half done: none count

        call = Call(hook, on_fault=forget)

        def sink(item: R) -> None:
            made.setdefault(call.current or "?", []).append(item)

        self._invoke(hook, {"register": registrar(sink)}, call)
        return [Registration(a.plugin, a.plugin in self._builtins, item)
                for a in call.answered for item in made.pop(a.plugin, [])]

    # -- state (loopx/seam/hookspecs/state.py)

    def register_stores(self) -> list[Registration[StoreRegistration]]:
        """``loopx_register_stores(register)`` (:func:`loopx.seam.hookspecs.state.loopx_register_stores`):
        a :class:`~loopx.seam.plugin_register.StoreRegistration` per call, in call order."""
        from loopx.seam.plugin_register import StoreRegistrar

        return self._registrations("loopx_register_stores", StoreRegistrar)

    def event_committed(self, registry: Registry, events: list[Event], *, skip: Iterable[str] | None = ()) -> None:
        """``loopx_event_committed(registry, events)`` (:func:`loopx.seam.hookspecs.state.loopx_event_committed`):
        tell observers about committed events; never raises. ``skip``: plugin names not to tell."""
        self._collect("loopx_event_committed", skip=skip, registry=registry, events=events)

    def gate_decided(self, writer: Writer, gate: Gate, decision: str, *, skip: Iterable[str] | None = ()) -> None:
        """``loopx_gate_decided(writer, gate, decision)`` (:func:`loopx.seam.hookspecs.state.loopx_gate_decided`),
        inside the decision's transaction, in the caller's thread. Fails closed: any fault raises
        :class:`HookFault` naming the plugin (the caller refuses the decision). ``skip``: plugin
        names not to ask."""
        hook = "loopx_gate_decided"
        call = Call(hook, raise_faults=True)
        self._invoke(hook, {"writer": writer, "gate": gate, "decision": decision}, call, self._without(hook, skip))
        if call.failed is not None:
            raise call.failed

    # -- contracts (loopx/seam/hookspecs/contracts.py)

    def contract_veto(self, tx: ReadTx, goal: Goal, *, check: Check | None = None,
                      skip: Iterable[str] | None = ()) -> Answer | None:
        """``loopx_contract_veto(tx, goal)`` (:func:`loopx.seam.hookspecs.contracts.loopx_contract_veto`),
        ``firstresult``: the first veto and its plugin, or ``None``.

        Fails closed: an implementation (or wrapper) that raises, runs past :func:`hook_timeout`
        or answers something ``check`` refuses raises :class:`HookFault` naming its plugin, even
        when a wrapper caught the fault and answered instead. ``skip``: plugin names not to ask.
        """
        hook = "loopx_contract_veto"
        call = Call(hook, check=check, timeout=hook_timeout(), raise_faults=True)
        value = self._invoke(hook, {"tx": tx, "goal": goal}, call, self._without(hook, skip))
        if call.failed is not None:
            raise call.failed
        if value is None:
            return None
        return self._credit(hook, call, [value])[0]

    def contract_actions(self, tx: ReadTx, goal: Goal, run_id: str, remaining: dict[str, Any] | None, *,
                         check: Check | None = None, skip: Iterable[str] | None = ()) -> list[Answer]:
        """``loopx_contract_actions(tx, goal, run_id, remaining)``
        (:func:`loopx.seam.hookspecs.contracts.loopx_contract_actions`): each plugin's list of
        actions, under :func:`hook_timeout`; one that fails or answers what ``check`` refuses is
        named and skipped. ``skip``: plugin names not to ask."""
        return self._collect("loopx_contract_actions", check=check, timeout=hook_timeout(), skip=skip, tx=tx, goal=goal,
                             run_id=run_id, remaining=remaining)

    # -- executors (loopx/seam/hookspecs/executors.py)

    def register_executors(self) -> list[Registration[ExecutorRegistration]]:
        """``loopx_register_executors(register)`` (:func:`loopx.seam.hookspecs.executors.loopx_register_executors`):
        an :class:`~loopx.seam.plugin_register.ExecutorRegistration` per call, in call order."""
        from loopx.seam.plugin_register import ExecutorRegistrar

        return self._registrations("loopx_register_executors", ExecutorRegistrar)

    # -- capabilities (loopx/seam/hookspecs/capabilities.py)

    def register_capabilities(self) -> list[Registration[CapabilityRegistration]]:
        """``loopx_register_capabilities(register)``
        (:func:`loopx.seam.hookspecs.capabilities.loopx_register_capabilities`): a :class:`~loopx.seam.plugin_register.CapabilityRegistration` per call."""
        from loopx.seam.plugin_register import CapabilityRegistrar

        return self._registrations("loopx_register_capabilities", CapabilityRegistrar)

    # -- commands (loopx/seam/hookspecs/commands.py)

    def register_commands(self, cli: click.Group, *, only: object | None = None) -> None:
        """``loopx_register_commands(cli)`` (:func:`loopx.seam.hookspecs.commands.loopx_register_commands`):
        a plugin whose hook raises adds no commands (what it added before raising is removed).
        ``only``: ask that one registered plugin alone (one registered after the CLI asked the rest)."""
        before: dict[str, click.Command] = {}

        def start(plugin: str) -> None:
            before.clear()
            before.update(cli.commands)

        def undo(plugin: str) -> None:
            cli.commands.clear()
            cli.commands.update(before)

        hook = "loopx_register_commands"
        caller = None
        if only is not None:
            others = [p for _, p in self._pm.list_name_plugin() if p is not only and p is not None]
            caller = self._pm.subset_hook_caller(hook, others)
        self._invoke(hook, {"cli": cli}, Call(hook, on_start=start, on_fault=undo), caller)

    # -- vocabulary (loopx/seam/hookspecs/vocabulary.py)

    def register_event_kinds(self) -> list[Registration[EventKindRegistration]]:
        """``loopx_register_event_kinds(register)``
        (:func:`loopx.seam.hookspecs.vocabulary.loopx_register_event_kinds`): an :class:`~loopx.seam.plugin_register.EventKindRegistration` per call."""
        from loopx.seam.plugin_register import EventKindRegistrar

        return self._registrations("loopx_register_event_kinds", EventKindRegistrar)

    def register_error_codes(self) -> list[Registration[ErrorCodeRegistration]]:
        """``loopx_register_error_codes(register)``
        (:func:`loopx.seam.hookspecs.vocabulary.loopx_register_error_codes`): an
        :class:`~loopx.seam.plugin_register.ErrorCodeRegistration` per call."""
        from loopx.seam.plugin_register import ErrorCodeRegistrar

        return self._registrations("loopx_register_error_codes", ErrorCodeRegistrar)

    # -- people (loopx/seam/hookspecs/notify.py)

    def notify(self, notification: dict[str, Any], *, timeout: float | None = None) -> list[Answer]:
        """``loopx_notify(notification)`` (:func:`loopx.seam.hookspecs.notify.loopx_notify`): each
        plugin's answer (``True`` when delivered), each under ``timeout``."""
        return self._collect("loopx_notify", timeout=timeout, notification=notification)

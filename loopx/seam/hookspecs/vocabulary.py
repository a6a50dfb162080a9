"""Hooks through which a plugin extends LoopX's vocabulary: its own event kinds and error codes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx.seam.hookspecs import hookspec, spec_names

if TYPE_CHECKING:
    from loopx.seam.plugin_register import ErrorCodeRegistrar, EventKindRegistrar


@hookspec
def loopx_register_event_kinds(register: EventKindRegistrar) -> None:
    """Register the plugin's own ledger event kinds.

    Call ``register(name, apply, writers=("capability",), guard=None, formerly=())`` once per kind. ``name``
    is namespaced, ``<namespace>.<verb>`` (``probe.noted``), and the namespace is not one of the
    core's areas (``goal``, ``todo``, ``gate``, ``run``, ...). ``apply(tx, event)`` applies one
    event to current state using only the event (it is also what a replay runs); ``writers`` are
    the roles allowed to write it (``user``, ``executor``, ``capability``; never ``core``);
    ``guard(writer, body)`` may refuse a write before it happens. ``formerly`` names older names of
    the kind that ledgers may hold (or a core kind that moved into the plugin, such as
    ``capability.repaired``): they replay through ``apply`` and are never written again. Events of a
    kind whose plugin is not installed stay in the ledger, replay as no-ops and are shown as an
    unknown kind (``loopx history``). Two plugins registering one kind is a ``plugin_error``.
    """


@hookspec
def loopx_register_error_codes(register: ErrorCodeRegistrar) -> None:
    """Register the plugin's own error codes.

    Call ``register(code, description)`` once per code; ``code`` is namespaced,
    ``<namespace>.<name>`` (``issue_fix.not_reproduced``). Raising ``LoopxError(code, message)``
    then works like a core code: exit status 2, one line, ``{"error": {"code", "message"}}``
    under ``--json``.
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only

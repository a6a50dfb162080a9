"""Hooks about people: telling a human that a goal needs them."""

from __future__ import annotations

from typing import Any

from loopx.seam.hookspecs import hookspec, spec_names


@hookspec
def loopx_notify(notification: dict[str, Any]) -> bool | None:
    """A goal has come to need a person (or a worker died): tell someone.

    Called once per change - when a goal's "needs you" state becomes a new one (a gate pending,
    ``ask_user``, a budget used up, the same step failing run after run, a repair needed, the
    process that took its turn died) - never again for the same state, and at most once per
    goal per ``notify.min_interval_seconds``. It is called by ``loopx worker``, which notices
    the change; the built-in channels (``notify.command``, ``notify.webhook``) run beside it.

    ``notification`` is a dict (``schema`` ``loopx.notification/1``): ``id`` (stable for this
    change), ``goal_id``, ``title``, ``decision``, ``reason`` (a stable code: ``gate_pending``,
    ``budget_exhausted``, ``repeated_failure``, ``no_ready_work``, ``worker_died``...),
    ``message`` (one sentence for people), ``commands`` (the exact commands to type, first the
    most useful), ``command`` (the first of them), ``at`` and ``registry``. Return ``True``
    when delivered; the answer is recorded with the notification. Must return quickly and must
    not write to the registry; an exception is reported and recorded as a failed delivery.
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only

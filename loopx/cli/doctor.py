"""``loopx doctor``: is this machine and registry ready for agents? Each check with its fix."""

from __future__ import annotations

import sys

import click

from loopx.cli.output import LoopxCommand, emit, registry_url

_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def _text(report: dict) -> str:
    lines = []
    for c in report["checks"]:
        lines.append(f"{_MARK[c['status']]}  {c['name']}: {c['summary']}")
        if c["fix"] and c["status"] != "ok":
            lines.append(f"      fix: {c['fix']}")
    failed = sum(c["status"] == "fail" for c in report["checks"])
    lines.append("all is well" if report["ok"] else f"{failed} thing(s) need fixing")
    return "\n".join(lines)


@click.command(cls=LoopxCommand)
@click.option("--notify-test", is_flag=True, help="Send a test notification through every target (recorded in "
                                                  "`loopx notify list`).")
def doctor(notify_test):
    """Check that this machine and registry are ready for agents, and say how to fix what is not.

    Confinement (Landlock, namespaces, bubblewrap, cgroups: what the kernel offers and what LoopX
    uses), the agent CLIs (version, logged in, without a model call), the integrity key and its
    mode, the registry (schema, damage), notification targets, workers alive, and plugins with
    their capabilities. Exit status 0 when all is well, 1 when something needs fixing.
    """
    from loopx import doctor as checks
    from loopx.cli.output import actor
    from loopx.values.errors import LoopxError

    if actor() != "user":
        # It reads the notification targets (a webhook URL may hold a token) and may send: not a
        # step's business (a step's `loopx` runs through the broker as the executor).
        raise LoopxError("actor_forbidden", "loopx doctor is for the user, not from inside a step")
    report = checks.run(registry_url(), notify_test=notify_test)
    emit(report, _text)
    if not report["ok"]:
        sys.exit(1)

"""``loopx`` in this process, given exactly the environment a real ``loopx`` process would get.

A real process costs about 0.25 s of CPU (the interpreter, click and the CLI's modules); a test
that checks only what a command prints (its ``--help``, its JSON) pays that for nothing it checks.
:func:`loopx_in_process` runs the same ``RootGroup.main`` the ``loopx`` command runs (usage errors
as one line, exit statuses), with ``os.environ`` replaced by ``env`` for the call and put back
after, output captured.

Not for what is about the process (signals, exit on a closed pipe, confinement, concurrency), and
never inside a confined step: there ``loopx`` is a broker client (``LOOPX_BROKER``, see
:mod:`loopx.entry`), whose authority comes from the broker, not from this process - such a call
is refused here rather than quietly run with the test process's authority.
"""

from __future__ import annotations

import os

from click.testing import CliRunner

from loopx.testing import CliResult


def loopx_in_process(*args, env: dict, input: str | None = None) -> CliResult:
    """Run ``loopx ARGS`` in this process with ``env`` as its whole environment -> :class:`CliResult`."""
    if env.get("LOOPX_BROKER"):
        raise AssertionError("inside a step loopx forwards to its broker: run a real process")
    from loopx.cli import cli

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        r = CliRunner().invoke(cli, [str(a) for a in args], input=input, prog_name="loopx",
                               catch_exceptions=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return CliResult(r.exit_code, r.stdout, r.stderr)


def in_process(registry_url: str, **extra_env):
    """``call(*args, env=None)`` -> :class:`CliResult`: ``loopx ARGS`` on ``registry_url`` in this
    process, with the environment a real process would get (``tests.conftest.loopx_env``).

    For set-up a test needs but does not check, e.g. ``make_goal(in_process(url), ...)``: a goal
    with actions and todos made by ``loopx`` processes cost about 1 s of CPU, for a test whose
    claim is about the turn or the worker that comes after.
    """
    from tests.conftest import loopx_env

    def call(*args, env=None, input=None):
        return loopx_in_process(*args, env=loopx_env(registry_url, **{**extra_env, **(env or {})}), input=input)

    call.url = registry_url
    return call

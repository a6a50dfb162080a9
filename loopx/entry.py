"""The ``loopx`` command's entry point (the console script and ``python -m loopx``).

Inside a confined step (``LOOPX_BROKER`` is set) every ``loopx`` an agent runs is a broker
client: it forwards its arguments to the step's broker and prints the answer
(:mod:`loopx.sandbox.broker_client`). It does that before anything of the command line is imported -
click and the CLI's modules cost a client about 30 ms it has no use for. ``loopx mcp`` runs
where it is started (its tool calls go to the broker).
"""

from __future__ import annotations

import gc
import os
import sys


def main() -> None:
    """Run ``loopx`` with ``sys.argv``: forwarded to the step's broker inside a step, else the CLI.

    A reader that goes away early (``loopx history G | head -1``) ends the command quietly with
    status 0, as ``git log | head`` does: what was asked for has been read.
    """
    try:
        try:
            if os.environ.get("LOOPX_BROKER") and sys.argv[1:2] != ["mcp"]:
                from loopx.sandbox.broker_client import forward

                sys.exit(forward(sys.argv[1:]))
            cli = _load_cli()
            cli()
        finally:
            # What is still buffered fails here, not in the interpreter's exit (status 120).
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        from loopx.values.terminal import closed_pipe

        closed_pipe()



def _load_cli():
    """Import the command line with the cyclic garbage collector paused, then freeze what it made.

    What the import creates (modules, classes, functions: ~100,000 objects) lives as long as
    the process, and every full collection walks all of it for nothing: ~24 M instructions of
    ``quota should-run``, which runs before every agent turn (docs/performance.md). So the
    collector is off while the command line is imported, and what exists then is moved to its
    permanent generation (``gc.freeze()``), which later collections skip; objects made after
    that are collected as usual, so a long-running ``serve`` or ``worker`` is unaffected.
    """
    gc.disable()
    try:
        from loopx.cli import main as cli
    finally:
        gc.freeze()
        gc.enable()
    return cli

"""The ``loopx`` command's entry point (the console script and ``python -m loopx``).

Inside a confined step (``LOOPX_BROKER`` is set) every ``loopx`` an agent runs is a broker
client: it forwards its arguments to the step's broker and prints the answer
(:mod:`loopx.broker_client`). It does that before anything of the command line is imported -
click and the CLI's modules cost a client about 30 ms it has no use for. ``loopx mcp`` runs
where it is started (its tool calls go to the broker).
"""

from __future__ import annotations

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
                from loopx.broker_client import forward

                sys.exit(forward(sys.argv[1:]))
            from loopx.cli import main as cli

            cli()
        finally:
            # What is still buffered fails here, not in the interpreter's exit (status 120).
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        from loopx.terminal import closed_pipe

        closed_pipe()


import os
import sys

if os.environ.get("LOOPX_BROKER") and sys.argv[1:2] != ["mcp"]:
    # Inside a confined step: forward to the step's broker without loading the CLI (`loopx mcp`
    # runs here; its tool calls go to the broker).
    from loopx.broker_client import forward

    sys.exit(forward(sys.argv[1:]))

from loopx.cli import main  # noqa: E402

main()

import os
import sys

if os.environ.get("LOOPX_BROKER"):
    # Inside a confined step: forward to the step's broker without loading the CLI.
    from loopx.broker_client import forward

    sys.exit(forward(sys.argv[1:]))

from loopx.cli import main  # noqa: E402

main()

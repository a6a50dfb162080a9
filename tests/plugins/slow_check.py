"""A test plugin: executor ``slow-check``, whose pre-turn check waits (a file, $SLOW_CHECK_GO) before
should-run - so a test can deliver a signal to a real `loopx turn` at that exact point."""

import os
import time

import loopx


class SlowCheck:
    """Its check() says it is there ($SLOW_CHECK_READY), then waits for $SLOW_CHECK_GO; its turn does nothing."""

    def check(self):
        open(os.environ["SLOW_CHECK_READY"], "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.environ["SLOW_CHECK_GO"]) and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting on the test's file, not for time to pass

    def run_turn(self, registry, contract, *, agent):
        return {"outcome": "partial", "tokens": 5, "cost": 0.5, "handoff": "ran"}


@loopx.hookimpl
def loopx_register_executors(register):
    register("slow-check", SlowCheck())

"""The worker's two helper threads (:mod:`loopx.worker`): one wakes the main loop when another
connection commits (:func:`watch_changes`), one sends notifications (:class:`Notifier`), each on
a registry connection of its own."""

from __future__ import annotations

import threading
import time
from typing import Callable

from loopx.values.worker_log import passing_fault


def watch_changes(url: str, poll_seconds: float, stopping: Callable[[], bool], changed: threading.Event,
                  wake: threading.Event) -> None:
    """Set ``changed`` and ``wake`` whenever another connection commits to the registry at ``url``,
    until ``stopping()``: PostgreSQL's ``LISTEN``, SQLite's ``data_version`` every ``poll_seconds``.
    Returns at once when it cannot watch (the main loop still wakes at least every minute)."""
    from loopx.ledger.registry import Registry

    try:
        watcher = Registry.open(url, readonly=True)
    except Exception:  # cannot watch: the main loop still wakes at least every MAX_SLEEP
        return
    store = watcher.store
    try:
        if hasattr(store, "wait_for_change"):  # PostgreSQL: LISTEN, no polling
            store.data_version()
            while not stopping():
                if store.wait_for_change(5.0):
                    changed.set()
                    wake.set()
            return
        seen = store.data_version()
        while not stopping():
            time.sleep(poll_seconds)
            now = store.data_version()
            if now != seen:
                seen = now
                changed.set()
                wake.set()
    except Exception:
        return
    finally:
        watcher.close()


class Notifier:
    """Runs :mod:`loopx.views.notify`'s checks in a thread of its own (a webhook's retries never hold up
    a turn), on a registry connection of its own."""

    def __init__(self, url: str, log=None):
        import queue

        self.url, self.log = url, log or (lambda *a, **k: None)
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def check(self, goal_ids: list[str]) -> None:
        """Check these goals (whose ledger moved) for a notification to send."""
        self.jobs.put(("goals", list(goal_ids)))

    def check_workers(self) -> None:
        """Check every open goal and the workers (at each heartbeat)."""
        self.jobs.put(("workers", None))

    def close(self, timeout: float = 10.0) -> None:
        """Finish the checks asked for, then stop the thread (waiting at most ``timeout`` seconds)."""
        self.jobs.put(None)
        self.thread.join(timeout)

    def _work(self) -> None:
        from loopx.views import notify
        from loopx.ledger.registry import Registry

        reg = None
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                try:
                    reg = reg or Registry.open(self.url)
                    if job[0] == "goals":
                        sent = notify.check_goals(reg, job[1])
                    else:
                        # Every open goal, not only those whose ledger moved: a goal comes to need
                        # someone when its cadence passes with no work left (no event says so), and a
                        # failed delivery is tried again here once its back-off has passed.
                        sent = notify.check_goals(reg, notify.open_goal_ids(reg))
                        sent += notify.check_workers(reg)
                    for n in sent or []:
                        self._sent(n)
                except Exception as exc:  # a notification problem never stops the worker
                    self.log("fault", what="notify", error=passing_fault(exc) or type(exc).__name__,
                             message=str(exc)[:300])
                    if reg is not None and passing_fault(exc):  # a fresh connection for the next check
                        try:
                            reg.close()
                        except Exception:
                            pass
                        reg = None
        finally:
            if reg is not None:
                reg.close()

    def _sent(self, n: dict) -> None:
        """One line per notification sent (each channel's result is in `loopx notify list`)."""
        self.log("notification", goal=n.get("goal_id"), reason=n.get("reason"), id=n.get("id"))

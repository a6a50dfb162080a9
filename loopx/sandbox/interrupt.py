"""SIGTERM and Ctrl-C (SIGINT) for the long-running commands: stop cleanly, lose nothing.

``loopx turn``, ``loopx loop`` and ``loopx worker`` run under :func:`handling`. The first
SIGTERM or SIGINT does not kill the process: it is noted (:func:`requested`), no new turn or
step is started, and the step that is running gets ``grace`` seconds to finish. When the grace
period is over, every process this one started (each step's process group and descendants) is
stopped (TERM, then KILL). A second signal stops them at once. The caller then records the
interruption as evidence and closes its run ``interrupted`` (:func:`loopx.turn.governed.turn`).

Step processes are started in sessions of their own, so a Ctrl-C typed in the terminal reaches
LoopX, not the step: it is LoopX that decides how long the step may go on.

It sits with :mod:`loopx.sandbox.process` in the lowest layer: it imports nothing of the domain.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

DEFAULT_GRACE_SECONDS = 30.0

_state = {"signal": None, "at": None, "forced": False, "grace": DEFAULT_GRACE_SECONDS, "timer": None}
_listeners: list = []  # callables told once when a stop is asked for (an executor's interrupt())
_wake = threading.Event()


def requested() -> int | None:
    """The signal that asked this process to stop (``signal.SIGTERM`` / ``SIGINT``), or ``None``."""
    return _state["signal"]


def describe() -> dict | None:
    """What was asked and when: ``{"signal": "SIGTERM", "forced": bool, "grace_seconds"}``, or ``None``."""
    sig = _state["signal"]
    if sig is None:
        return None
    return {"signal": signal.Signals(sig).name, "forced": _state["forced"], "grace_seconds": _state["grace"]}


def wait(seconds: float) -> bool:
    """Sleep up to ``seconds``; wake early (returning True) when a stop is requested."""
    return _wake.wait(max(0.0, seconds))


def stop_children() -> list[int]:
    """Stop every process this one started, with its group and descendants. Returns the pids."""
    from loopx.sandbox.process import descendants, kill_tree

    me = os.getpid()
    found = sorted(descendants(me))
    _state["forced"] = _state["forced"] or bool(found)
    for pid in found:
        if pid != me:
            kill_tree(pid, grace=1.0)
    return found


def _tell(listeners) -> None:
    import sys

    for listener in listeners:
        try:
            listener()
        except Exception as exc:  # a broken listener must not keep the stop from happening
            print(f"loopx: warning: {getattr(listener, '__qualname__', listener)!s} failed when asked to stop: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)


@contextmanager
def on_stop(listener):
    """Tell ``listener()`` (once, from a thread of its own) when a stop is asked for while the
    block runs, or at once if it was asked for already. ``None`` listens to nothing.

    This is how the core asks an executor to stop (:class:`loopx.turn.executors.protocol.InterruptibleExecutor`):
    the listener must return quickly; the grace period and the stopping of children still apply.
    """
    if listener is None:
        yield
        return
    _listeners.append(listener)
    try:
        if _state["signal"] is not None:
            _tell([listener])
        yield
    finally:
        _listeners.remove(listener)


def _on_signal(signum, frame):
    if _state["signal"] is None:
        _state["signal"], _state["at"] = signum, time.monotonic()
        _wake.set()
        if _listeners:
            # Not in the signal handler: a listener may take a lock the interrupted code holds.
            threading.Thread(target=_tell, args=(list(_listeners),), name="loopx-stop", daemon=True).start()
        timer = threading.Timer(_state["grace"], stop_children)
        timer.daemon = True
        _state["timer"] = timer
        timer.start()
    else:  # asked twice: no more grace
        threading.Thread(target=stop_children, daemon=True).start()


@contextmanager
def handling(grace: float = DEFAULT_GRACE_SECONDS):
    """Handle SIGTERM and SIGINT as a graceful stop for the duration of the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.update(signal=None, at=None, forced=False, grace=float(grace), timer=None)
    _wake.clear()
    before = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        if _state["timer"] is not None:
            _state["timer"].cancel()


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGTERM when the process that started this one dies (Linux's
    ``PR_SET_PDEATHSIG``), so a worker's turn never runs on unsupervised after its worker was
    killed: the signal is taken as any stop (:func:`handling`) and the run closed ``interrupted``.
    A parent already gone (``parent_pid`` is no longer the parent) counts as that signal now."""
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # it died before the request was in place
        os.kill(os.getpid(), signal.SIGTERM)


def exit_code() -> int:
    """The shell's status for a process ended by the signal it was asked to stop with (130, 143)."""
    sig = _state["signal"]
    return 0 if sig is None else 128 + int(sig)

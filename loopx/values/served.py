"""What a command served in LoopX's own process sees: its own output and ``LOOPX_*`` variables.

A turn's broker (:mod:`loopx.turn.broker`) serves a step's ``loopx`` commands in the turn's process,
several at once: an ``exec`` whose confined child calls ``loopx`` again is served while that
``exec`` still runs, and an agent may run commands side by side. ``sys.stdout``, ``sys.stderr``
and ``os.environ`` belong to the whole process, so while any command is served:

* ``sys.stdout`` / ``sys.stderr`` route each write to the stream of the command the writing
  thread serves (other threads write where they wrote before);
* ``os.environ`` reads, in a serving thread, the variables of its command (the run's identity)
  over the process's own; writes still change the process's environment.

Nothing else of a served command is process-wide: its identity is a context variable
(:data:`loopx.ledger.registry.IDENTITY`), and it never changes the working directory (the paths it
is given are made absolute by the broker first).
"""

from __future__ import annotations

import contextvars
import io
import os
import sys
import threading
from contextlib import contextmanager

_STREAMS: contextvars.ContextVar = contextvars.ContextVar("loopx_served_streams", default=None)
_ENV: contextvars.ContextVar = contextvars.ContextVar("loopx_served_env", default=None)
_lock = threading.Lock()
_serving = 0
_saved: tuple | None = None


class Capture(io.TextIOWrapper):
    """A text stream over bytes, like the one ``click.testing`` swaps in."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace")

    def value(self) -> str:
        """Everything written so far."""
        self.flush()
        return self.buffer.getvalue().decode("utf-8", errors="replace")


class _Routed:
    """``sys.stdout`` or ``sys.stderr`` while commands are served: the serving thread's stream."""

    def __init__(self, index: int, fallback):
        self._index, self._fallback = index, fallback

    def _target(self):
        streams = _STREAMS.get()
        return self._fallback if streams is None else streams[self._index]

    def write(self, text):
        return self._target().write(text)

    def flush(self):
        return self._target().flush()

    def __getattr__(self, name):
        return getattr(self._target(), name)


class _Environ(type(os.environ)):
    """``os.environ`` with the serving thread's variables over the process's (``None``: unset)."""

    def __getitem__(self, key):
        layer = _ENV.get()
        if layer is not None and key in layer:
            if layer[key] is None:
                raise KeyError(key)
            return layer[key]
        return super().__getitem__(key)

    def __iter__(self):
        layer = _ENV.get()
        if layer is None:
            yield from super().__iter__()
            return
        yield from (key for key in super().__iter__() if key not in layer)
        yield from (key for key, value in layer.items() if value is not None)

    def __len__(self):
        return sum(1 for _ in self)

    def copy(self):
        return dict(self)


@contextmanager
def serving(env: dict):
    """Serve one command in this thread: yields its ``(stdout, stderr)`` captures; ``env``: its
    variables (a value ``None`` hides the process's)."""
    global _serving, _saved
    out, err = Capture(), Capture()
    tokens = _STREAMS.set((out, err)), _ENV.set(dict(env))
    with _lock:
        if type(os.environ) is not _Environ:
            os.environ.__class__ = _Environ
        if _serving == 0:
            _saved = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = _Routed(0, _saved[0]), _Routed(1, _saved[1])
        _serving += 1
    try:
        yield out, err
    finally:
        with _lock:
            _serving -= 1
            if _serving == 0:
                # Put back what was there, unless someone else replaced the streams meanwhile.
                if isinstance(sys.stdout, _Routed):
                    sys.stdout = _saved[0]
                if isinstance(sys.stderr, _Routed):
                    sys.stderr = _saved[1]
                _saved = None
        _ENV.reset(tokens[1])
        _STREAMS.reset(tokens[0])

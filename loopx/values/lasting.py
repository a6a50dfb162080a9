"""What lasts as long as the process, made with the cyclic garbage collector paused (``quota should-run``'s start-up).

What importing a module makes (its functions, classes, attrs' generated methods, tables) and
the plugin manager live as long as the process, and every collection their making triggers
walks them for nothing: ~12 M instructions of ``quota should-run``, which runs before every
agent turn (docs/performance.md). :mod:`loopx.entry` imports the command line that way;
:func:`lasting` does the same for what the command line makes later (a command's view, the
plugin manager), with the public ``gc`` API only.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_made: set[str] = set()


@contextmanager
def lasting(name: str) -> Iterator[None]:
    """Around making ``name`` (a module's import: its name; anything else: a name of its own) for
    the first time in this process: pause the collector, and afterwards move every object that
    exists to the permanent generation (``gc.freeze()``), which later collections skip, before
    turning it back on. Does nothing when ``name`` was made before or the collector is off.

    Only the first time pauses and freezes: a long-running process (``serve``, ``worker``, a test
    session) that runs commands again and again keeps a working collector for what they make.
    """
    if name in sys.modules or name in _made or not gc.isenabled():
        yield
        return
    _made.add(name)
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()

"""How LoopX starts LoopX: one argv, environment and working directory for every such child.

LoopX's own processes act with the user's authority, often on a step's behalf (the broker's
child, the worker's turns, ``exec``'s capability step, the shell executor's steps). A child
started as ``python -m loopx`` in a directory a step can write would import whatever the step
planted there (``loopx/__main__.py``, ``loopx.py``, ``sitecustomize.py``...). So every child of
LoopX that is LoopX itself is started by :func:`command`:

* the interpreter in **isolated mode** (``-I``: no ``PYTHON*`` variables, no user site, neither
  the working directory nor a script's directory on ``sys.path``);
* an **absolute entry point**: :func:`loopx.entry.main`, imported from the places this LoopX was
  imported from (the environment's site-packages, an editable install's ``.pth`` files, and the
  absolute entries of this process's own ``PYTHONPATH``, passed as arguments - the way a test
  harness's plugins reach a child - never a relative one, never anything of a step's);
* a **working directory LoopX chooses** (:data:`CWD`), never the directory a request names;
* an **environment LoopX builds**: this process's own (a user's, never a step's) with the
  caller's changes.
"""

from __future__ import annotations

import os
import sys

#: Where a child of LoopX runs: a directory no step (and no other user) can write.
CWD = "/"

#: The entry point run by ``python -I -c``: puts the given import roots first, then runs the
#: ``loopx`` command (``loopx.entry.main``) with the remaining arguments.
BOOT = ("import sys; f, r = sys.argv[1:3]; del sys.argv[1:3]; sys.path[0:0] = [p for p in f.split({sep!r}) if p]; "
        "r in sys.path or sys.path.append(r); sys.argv[0] = 'loopx'; from loopx.entry import main; main()"
        ).format(sep=os.pathsep)


def roots() -> tuple[str, str]:
    """``(the absolute entries of this process's PYTHONPATH, joined; the directory holding the
    loopx package this process runs)``: what a child needs to import the same LoopX and plugins."""
    front = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.pathsep.join(front), here


def argv(args: list[str]) -> list[str]:
    """``loopx ARGS`` as a child of this process: isolated interpreter, absolute entry point."""
    front, here = roots()
    return [sys.executable, "-I", "-c", BOOT, front, here, *args]


def environment(changes: dict | None = None) -> dict:
    """This process's environment with ``changes`` (a value ``None`` removes a variable)."""
    env = dict(os.environ)
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def command(args: list[str], changes: dict | None = None) -> dict:
    """``{"args", "env", "cwd"}`` for ``subprocess`` to run ``loopx ARGS`` as LoopX's own child."""
    return {"args": argv(args), "env": environment(changes), "cwd": CWD}


def console_script() -> list[str]:
    """The installed ``loopx`` program as an absolute path (a service's ``ExecStart``), else the
    isolated interpreter of :func:`argv`."""
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "loopx")
    found = beside if os.access(beside, os.X_OK) else shutil.which("loopx")
    return [os.path.abspath(found)] if found else argv([])

"""``loopx plugins install|uninstall``: pip, run for the Python environment LoopX itself runs in.

As ``llm install`` does: ``sys.executable -m pip``, so a plugin lands where ``loopx`` will find
it whether LoopX was installed with pip, pipx or ``scripts/install.sh``. What changed is read
from the environment's installed distributions before and after, not from pip's output.
"""

from __future__ import annotations

import os
import subprocess
import sys

from loopx.errors import LoopxError

# Distributions ``uninstall`` refuses: removing them would remove LoopX itself.
PROTECTED = {"loopx", "pip"}


def _installed() -> dict[str, str]:
    from importlib.metadata import distributions

    found: dict[str, str] = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_canonical(name), dist.version)
    return found


def _loopx_plugins() -> dict[str, list[str]]:
    """distribution -> the ``loopx`` entry points it declares (a fresh scan, no cache)."""
    from importlib.metadata import entry_points

    out: dict[str, list[str]] = {}
    for ep in entry_points(group="loopx"):
        if ep.dist is not None:
            out.setdefault(_canonical(ep.dist.name), []).append(ep.name)
    return out


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _pip(args: list[str]) -> None:
    from loopx import selfrun

    # Isolated and in LoopX's own directory: `-m pip` must find this environment's pip, not a
    # `pip/` in the directory the user happens to be in (a path to install is absolute by now).
    proc = subprocess.run([sys.executable, "-I", "-m", "pip", *args], capture_output=True, text=True,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, cwd=selfrun.CWD)
    if proc.returncode != 0:
        # pip's own last error line is the useful one; the rest goes to stderr untouched.
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        detail = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "")
        raise LoopxError("plugin_error", f"pip {args[0]} failed: {detail.strip()}")


def _changes(before: dict[str, str], after: dict[str, str]) -> dict:
    plugins = _loopx_plugins()
    changed = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old != new:
            changed.append({"distribution": name, "before": old, "after": new,
                            "plugins": plugins.get(name, [])})
    return {"python": sys.executable, "changed": changed}


def install(specs: list[str], *, upgrade: bool = False, editable: bool = False) -> dict:
    """pip-install ``specs`` (names or paths) into this environment; what changed."""
    if not specs:
        raise LoopxError("invalid_argument", "name a plugin distribution or a path to install")
    args = ["install"]
    if upgrade:
        args.append("--upgrade")
    for spec in specs:
        looks_like_path = os.sep in spec or spec.startswith(".") or os.path.exists(spec)
        if looks_like_path:
            if not os.path.exists(spec):
                raise LoopxError("invalid_argument", f"no such path: {spec}")
            spec = os.path.abspath(spec)
        if editable:
            args.append("--editable")
        args.append(spec)
    before = _installed()
    _pip(args)
    return _changes(before, _installed())


def uninstall(names: list[str]) -> dict:
    """pip-uninstall the distributions ``names`` from this environment; what changed."""
    before = _installed()
    for name in names:
        if _canonical(name) in PROTECTED:
            raise LoopxError("invalid_argument", f"{name} is LoopX itself (or its installer); not uninstalling it")
        if _canonical(name) not in before:
            raise LoopxError("not_found", f"{name} is not installed in {sys.prefix}")
    _pip(["uninstall", "--yes", *names])
    return _changes(before, _installed())

"""``loopx plugins install|uninstall``: pip, run for the Python environment LoopX itself runs in.

As ``llm install`` does: ``sys.executable -m pip``, so a plugin lands where ``loopx`` will find
it whether LoopX was installed with pip, pipx or ``scripts/install.sh``. What changed is read
from the environment's installed distributions before and after, not from pip's output.
"""

from __future__ import annotations

import os
import subprocess
import sys

from loopx.values.errors import LoopxError

# Distributions ``uninstall`` refuses: removing them would remove LoopX itself (``loopx`` is
# refused too: an older install of LoopX was named so).
PROTECTED = {"loopx-control", "loopx", "pip"}


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
    from loopx.sandbox import selfrun
    from loopx.values.progress import progress

    # Isolated and in LoopX's own directory: `-m pip` must find this environment's pip, not a
    # `pip/` in the directory the user happens to be in (a path to install is absolute by now).
    # pip's lines are read as they come: on a terminal the latest is shown on one line
    # redrawn in place (an install can take half a minute); in a pipe nothing is printed.
    proc = subprocess.Popen([sys.executable, "-I", "-m", "pip", *args], stdout=subprocess.PIPE, cwd=selfrun.CWD,
                            stderr=subprocess.STDOUT, text=True, errors="replace",
                            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_PROGRESS_BAR": "off"})
    lines: list[str] = []
    bar = progress(None, f"pip {args[0]}")
    bar.note(" ".join(a for a in args[1:] if not a.startswith("-")))
    with bar:
        for line in proc.stdout:
            if line.strip():
                lines.append(line.rstrip())
                bar.note(line.strip())
        proc.wait()
    if proc.returncode != 0:
        # pip's own last error line is the useful one.
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
    """pip-uninstall plugins from this environment; what changed. Each name is a distribution
    (``loopx-issue-fix``) or a plugin's name as ``loopx plugins`` shows it (``issue_fix``)."""
    before = _installed()
    by_plugin = {ep: dist for dist, eps in _loopx_plugins().items() for ep in eps}
    dists = []
    for name in names:
        dist = _canonical(name) if _canonical(name) in before else by_plugin.get(name, _canonical(name))
        if dist in PROTECTED or name in _builtin_names():
            raise LoopxError("invalid_argument", f"{name} is LoopX itself (or its installer); not uninstalling it")
        if dist not in before:
            raise LoopxError("not_found", f"{name} is neither a distribution nor a plugin installed in {sys.prefix}")
        dists.append(dist)
    _pip(["uninstall", "--yes", *dists])
    return _changes(before, _installed())


def _builtin_names() -> set[str]:
    from loopx.seam.plugins import BUILTINS

    return set(BUILTINS)

"""What a fix may not change: the tests, their configuration, the files they read, the interpreter.

The reference is the *reproduction tree*: the base commit plus the reproducing test that was in
the worktree when LoopX saw it fail (checkpointed then). Against it, a candidate tree may not
change (:func:`tests_changed`):

- a ``conftest.py`` anywhere, a test module by pytest's default names (``test_*.py``,
  ``*_test.py``), or any ``.py`` file in a ``test``/``tests``/``testing`` directory;
- pytest's configuration: ``pytest.ini`` / ``.pytest.ini`` whole, and the pytest sections of
  ``pyproject.toml`` (``[tool.pytest...]``), ``setup.cfg`` (``[tool:pytest]``) and ``tox.ini``
  (``[pytest]``);
- a file holding a test that ran at the reproduction (whatever its name);
- a file the reproduction's test run *opened* that is not Python code (a data file the tests
  read their expected values from), as the probe's audit hook recorded it.

:func:`environment` fingerprints the interpreter's start-up code: every ``.pth`` file in its
site-packages and any ``sitecustomize``/``usercustomize`` module. A change after ``start``
means someone shaped the interpreter the tests run on (:func:`environment_changed`).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

CONFIG_WHOLE = ("pytest.ini", ".pytest.ini")
CONFIG_SECTIONS = ("pyproject.toml", "setup.cfg", "tox.ini")
_TEST_DIRS = {"test", "tests", "testing"}
_CODE = (".py", ".pyc", ".pyo", ".pyd", ".so")
_TEST_NAME = re.compile(r"^(test_.*|.*_test)\.py$")


def is_test_path(path: str) -> bool:
    """A conftest, a test module by name, or Python code in a test directory."""
    p = PurePosixPath(path)
    if p.name == "conftest.py" or _TEST_NAME.match(p.name):
        return True
    return p.suffix == ".py" and bool(_TEST_DIRS & set(p.parts[:-1]))


def is_code(path: str) -> bool:
    """Python source or compiled code (what a fix is for), not data."""
    return path.endswith(_CODE) or "__pycache__/" in path


def data_files(opened: list[str]) -> list[str]:
    """The files a test run opened that are data, not code (the probe's audit record)."""
    return sorted(p for p in opened if not is_code(p) and not p.startswith(".git/"))


def pytest_section(name: str, text: bytes | None) -> str | None:
    """The pytest configuration inside ``pyproject.toml`` / ``setup.cfg`` / ``tox.ini``, as
    comparable text (``None`` when the file or section is absent; the raw text if unparsable)."""
    import configparser
    import json

    if text is None:
        return None
    raw = text.decode("utf-8", "replace")
    try:
        if name == "pyproject.toml":
            import tomllib

            section = tomllib.loads(raw).get("tool", {}).get("pytest")
            return None if section is None else json.dumps(section, sort_keys=True)
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(raw)
        wanted = ("tool:pytest",) if name == "setup.cfg" else ("pytest", "tool:pytest")
        found = {s: dict(parser.items(s)) for s in wanted if parser.has_section(s)}
        return json.dumps(found, sort_keys=True) if found else None
    except Exception:  # noqa: BLE001 - an unparsable file is compared as it is
        return raw


def tests_changed(repo: str, base_tree: str, tree: str, *, test_files: list[str], opened: list[str],
                  exempt: list[str] | tuple[str, ...] = (), changed: list[str] | None = None) -> list[str]:
    """The paths whose change makes the tests not the base's (see the module's docstring).

    ``changed``: the paths that differ between the two trees, when the caller already asked git.
    """
    from loopx_issue_fix import gitrepo

    if changed is None:
        changed = gitrepo.changed_paths(repo, base_tree, tree)
    known, data = set(test_files), set(data_files(opened))
    out = []
    for path in changed:
        if path in exempt:
            continue
        name = PurePosixPath(path).name
        if name in CONFIG_SECTIONS:
            if pytest_section(name, gitrepo.blob(repo, base_tree, path)) != \
                    pytest_section(name, gitrepo.blob(repo, tree, path)):
                out.append(path)
        elif name in CONFIG_WHOLE or is_test_path(path) or path in known or path in data:
            out.append(path)
    return out


_ENV_SCRIPT = r"""
import hashlib, json, os, site, sys
dirs = []
for d in (site.getsitepackages() if hasattr(site, "getsitepackages") else []) + [p for p in sys.path if p]:
    if os.path.isdir(d) and d not in dirs:
        dirs.append(d)
files = {}
for d in dirs:
    for name in sorted(os.listdir(d)):
        if name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py") or \
                name.startswith(("sitecustomize.", "usercustomize.")) or name in ("sitecustomize", "usercustomize"):
            p = os.path.join(d, name)
            try:
                with open(p, "rb") as fh:
                    files[p] = hashlib.sha256(fh.read()).hexdigest()
            except OSError:
                files[p] = "unreadable"
print(json.dumps({"python": sys.version.split()[0], "prefix": sys.prefix, "files": files, "dirs": dirs}))
"""


def environment(interpreter: str, timeout: float = 30) -> dict[str, Any] | None:
    """``{"interpreter", "python", "prefix", "files": {path: sha256}, "dirs"}``: the start-up code the
    interpreter runs (``.pth`` files, ``sitecustomize``) and the directories it was looked for in,
    asked in isolated mode; ``None`` if it cannot be asked."""
    import json

    from loopx import api

    from loopx_issue_fix.testrun import clean_env

    res = api.process.run([interpreter, "-I", "-B", "-c", _ENV_SCRIPT], env=clean_env(), timeout=timeout, cwd="/",
                      tail_bytes=1 << 20)
    if res["exit_code"] != 0 or res["timed_out"]:
        return None
    try:
        info = json.loads(res["output_tail"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return {"interpreter": interpreter, **info}


def environment_changed(before: dict[str, Any] | None, now: dict[str, Any] | None) -> list[str]:
    """The start-up files added, removed or changed since ``before`` (what was recorded at start)."""
    if not before:
        return []
    if now is None:
        return [f"{before['interpreter']} (cannot be run any more)"]
    a, b = before.get("files", {}), now.get("files", {})
    return sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))

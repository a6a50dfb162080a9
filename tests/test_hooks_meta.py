"""The plugin seam is a documented contract: every hook is specified, documented and tested."""

import importlib
import inspect
import re

from tests.conftest import ROOT

from loopx import hookspecs


def _specs():
    for module_name in hookspecs.MODULES:
        module = importlib.import_module(module_name)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("loopx_") and fn.__module__ == module_name:
                yield module_name, name, fn


def _implemented_hooks() -> set[str]:
    """Hook names implemented anywhere in the code we ship (core, plugins, examples)."""
    found = set()
    for base in ("loopx", "plugins", "examples"):
        for path in (ROOT / base).rglob("*.py"):
            if "tests" in path.parts or path.parts[-2:-1] == ("hookspecs",):
                continue
            found |= set(re.findall(r"@(?:loopx\.)?hookimpl[^\n]*\n\s*def (loopx_\w+)\(", path.read_text()))
    return found


def test_every_hookspec_has_a_docstring():
    specs = list(_specs())
    assert len(specs) >= 7
    for module_name, name, fn in specs:
        assert (fn.__doc__ or "").strip(), f"{module_name}.{name} has no docstring"


def test_every_hookspec_is_documented_for_plugin_authors():
    guide = (ROOT / "docs" / "plugins.md").read_text()
    missing = [name for _, name, _ in _specs() if name not in guide]
    assert not missing, f"docs/plugins.md does not document: {missing}"


def test_every_implemented_hook_has_a_test():
    spec_names = {name for _, name, _ in _specs()}
    implemented = _implemented_hooks() & spec_names
    test_text = "\n".join(p.read_text() for base in ("tests", "plugins") for p in (ROOT / base).rglob("test_*.py")
                          if p.name != "test_hooks_meta.py")
    untested = sorted(h for h in implemented if h not in test_text)
    assert not untested, f"hooks implemented but named by no test: {untested}"


def test_no_implementation_of_an_unknown_hook():
    spec_names = {name for _, name, _ in _specs()}
    unknown = sorted(_implemented_hooks() - spec_names)
    assert not unknown, f"implementations of hooks that have no spec: {unknown}"


def test_plugin_implementing_unknown_hook_is_reported_by_name(tmp_path, monkeypatch):
    import subprocess
    import sys

    pkg = tmp_path / "site"
    (pkg / "bad_plugin").mkdir(parents=True)
    (pkg / "bad_plugin" / "__init__.py").write_text(
        "from loopx import hookimpl\n\n@hookimpl\ndef loopx_no_such_hook():\n    pass\n")
    (pkg / "broken_plugin").mkdir()
    (pkg / "broken_plugin" / "__init__.py").write_text("raise RuntimeError('boom at import')\n")
    dist = pkg / "bad_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[loopx]\nbad = bad_plugin\nbroken = broken_plugin\n")
    env = {"PYTHONPATH": str(pkg), "LOOPX_REGISTRY": str(tmp_path / "r.db"), "LOOPX_PLUGIN_CACHE": "0",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "loopx", "plugins", "--json"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "plugin 'bad'" in p.stderr and "loopx_no_such_hook" in p.stderr
    assert "plugin 'broken'" in p.stderr and "boom at import" in p.stderr
    import json

    listed = {x["name"]: x for x in json.loads(p.stdout)}
    assert "error" in listed["bad"] and "error" in listed["broken"]
    # The core keeps working with the broken plugins installed, and the block-list silences them.
    from loopx.registry import Registry

    Registry.open(str(tmp_path / "r.db")).close()  # read commands need an existing registry
    env["LOOPX_DISABLE_PLUGINS"] = "bad,broken"
    p = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""
    env.pop("LOOPX_DISABLE_PLUGINS")
    env["LOOPX_PLUGINS"] = "none-of-them"
    p = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""

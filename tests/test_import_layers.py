"""The import direction of the architecture holds and loopx has no import circles, checked by
import-linter with the contracts in pyproject.toml ([tool.importlinter])."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_import_contracts_are_kept():
    pytest.importorskip("importlinter", reason="install the test extra: pip install -e '.[test]'")
    p = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c;"
                        " sys.exit(c.main(args=['--no-cache'], standalone_mode=False))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in p.stdout


def layered_modules() -> set[str]:
    """Every module or package named in a layer of pyproject.toml's import-linter contracts."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = set()
    for contract in config["contracts"]:
        for container in contract.get("containers") or [""]:
            for layer in contract.get("layers", []):
                for name in layer.replace("|", ":").split(":"):
                    named.add(f"{container}.{name.strip()}" if container else name.strip())
    return named


def test_every_module_is_in_a_layer():
    """A module in no layer is checked by no contract: it may import anything, and anything may
    import it. Every module of the package (walked on disk) sits in a layer itself or inside a
    package that does."""
    named = layered_modules()
    missing = []
    for path in sorted((ROOT / "loopx").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) == 1:  # loopx itself
            continue
        if not any(".".join(parts[:i]) in named for i in range(2, len(parts) + 1)):
            missing.append(".".join(parts))
    assert missing == [], f"add these to a layer in pyproject.toml [tool.importlinter]: {missing}"


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_should_run_imports_cattrs_nowhere(registry_url):
    # cattrs is imported only to build values from JSON (see tests/test_model_json.py); `quota should-run`,
    # which runs before every agent turn, turns its flat values into JSON without it.
    from tests.conftest import loopx_env

    env = loopx_env(registry_url)

    def loopx(*args, importtime=False):
        return subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "loopx", *args],
                              env=env, capture_output=True, text=True, timeout=120)

    import json

    from tests.cli_helpers import loopx_in_process

    # The goal is set up in this process; what is checked is what a should-run process imports.
    g = loopx_in_process("project_prompt", "create", "--title", "T", "--json", env=env).json["id"]
    assert loopx_in_process("todo", "add", "--goal-id", g, "--text", "a step", env=env).code == 0
    assert loopx_in_process("quota", "set", "--goal-id", g, "--max-turns", "5", env=env).code == 0
    for _ in range(2):  # a new run, then the same agent's open run handed back
        p = loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json", importtime=True)
        assert json.loads(p.stdout)["decision"] == "run"
        imported = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")]
        assert "loopx.views.contract" in imported and not [m for m in imported if m.split(".")[0] == "cattrs"]

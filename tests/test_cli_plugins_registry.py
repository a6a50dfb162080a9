"""`loopx plugins install|uninstall` into the environment LoopX runs in, and `loopx registry info`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, loopx_env

SEED_DOMAIN = ROOT / "examples" / "plugins" / "loopx-seed-domain"


def _copy_source(src: Path, dest: Path) -> Path:
    """A copy of a source tree to install from: pip builds in the source folder (build/,
    *.egg-info), and the checkout must stay as it was (an egg-info there would make the
    example plugin's entry point visible to the rest of the suite)."""
    import shutil

    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", "test-artifacts", "node_modules"))
    return dest


def _run(argv, env=None, timeout=300):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def _on_a_terminal(argv, env, timeout=300):
    """Run ``argv`` with stderr on a real terminal (a pty), stdout a pipe; stderr as text."""
    import pty

    leader, follower = pty.openpty()
    try:
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=follower, text=True)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other side closed: the process ended
                break
            if not chunk:
                break
            seen += chunk
        out = p.stdout.read()
        p.wait(timeout=timeout)
    finally:
        os.close(leader)
    return subprocess.CompletedProcess(argv, p.returncode, out, seen.decode(errors="replace"))


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
@pytest.mark.slow
def test_plugins_install_and_uninstall_into_loopx_own_environment(tmp_path, registry_url):
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    py = venv / "bin" / "python"
    built = _run([str(py), "-m", "pip", "install", "-q", str(_copy_source(ROOT, tmp_path / "loopx-src"))])
    assert built.returncode == 0, built.stderr[-2000:]
    loopx = str(venv / "bin" / "loopx")
    env = loopx_env(registry_url, LOOPX_PLUGIN_CACHE="0")
    env.pop("LOOPX_PLUGINS")  # this test is about what is installed: no allow-list

    before = _run([loopx, "--help"], env=env).stdout
    assert "run-model" not in before

    source = str(_copy_source(SEED_DOMAIN, tmp_path / "loopx-seed-domain"))
    p = _run([loopx, "plugins", "install", source], env=env)
    assert p.returncode == 0, p
    assert "installed loopx-seed-domain 0.1.0  (loopx plugin: seed_domain)" in p.stdout
    assert str(py) in p.stdout  # says which environment changed
    assert p.stderr == ""  # in a pipe: no progress

    listed = json.loads(_run([loopx, "plugins", "--json"], env=env).stdout)
    assert "seed_domain" in {x["name"] for x in listed}
    assert "run-model" in _run([loopx, "--help"], env=env).stdout
    # the environment the test suite itself runs in is untouched
    mine = _run([sys.executable, "-m", "loopx", "plugins", "--json"], env=env)
    assert "seed_domain" not in {x["name"] for x in json.loads(mine.stdout)}

    # Uninstalled by the name `loopx plugins` shows...
    p = _run([loopx, "plugins", "uninstall", "seed_domain", "--json"], env=env)
    assert p.returncode == 0, p
    assert json.loads(p.stdout)["changed"] == [
        {"distribution": "loopx-seed-domain", "before": "0.1.0", "after": None, "plugins": []}]
    assert "run-model" not in _run([loopx, "--help"], env=env).stdout
    # ... or by its distribution's; installed again on a terminal, pip's progress shows on one line.
    on_tty = _on_a_terminal([loopx, "plugins", "install", source], env=env)
    assert on_tty.returncode == 0 and "installed loopx-seed-domain" in on_tty.stdout, on_tty
    assert "\r\x1b[Kpip install: " in on_tty.stderr and "Successfully installed loopx-seed-domain" in on_tty.stderr
    p = _run([loopx, "plugins", "uninstall", "loopx-seed-domain", "--json"], env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["changed"][0]["after"] is None, p

    for args, code in ((["install", str(tmp_path / "nowhere")], "invalid_argument"),
                       (["uninstall", "loopx"], "invalid_argument"),
                       (["uninstall", "loopx.builtin"], "invalid_argument"),
                       (["uninstall", "seed_domain"], "not_found"),
                       (["uninstall", "loopx-seed-domain"], "not_found")):
        p = _run([loopx, "plugins", *args], env=env)
        assert p.returncode == 2 and p.stderr.strip().endswith(f"[{code}]"), (args, p)
        assert len(p.stderr.strip().splitlines()) == 1
    assert _run([str(py), "-m", "pip", "show", "loopx-control"]).returncode == 0  # LoopX is still there


@pytest.mark.slow
def test_registry_info_says_which_registry_and_why(registry_url, loopx_proc, tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    assert loopx_proc("project-prompt", "create", "--title", "one").code == 0
    assert loopx_proc("project-prompt", "create", "--title", "two").code == 0
    gid = loopx_proc("project-prompt", "list", "--json").json[0]["id"]
    assert loopx_proc("project-prompt", "close", gid).code == 0

    info = loopx_proc("registry", "info", "--json").json  # LOOPX_REGISTRY is set by the fixture
    assert info["source"] == "env"
    assert info["backend"] == ("postgresql" if registry_url.startswith("postgres") else "sqlite")
    assert info["exists"] and info["goals"] == 2 and info["goals_closed"] == 1 and info["events"] == 3
    assert info["schema_version"] == info["schema_supported"] >= 1
    assert info["size_bytes"] > 0
    if info["backend"] == "sqlite":
        assert info["path"] == str(Path(registry_url).resolve())
    else:
        assert "loopx:loopx@" not in info["url"]  # the password is not printed

    text = loopx_proc("registry", "info")
    assert text.code == 0 and "LOOPX_REGISTRY" in text.out and "goals       2 (1 closed)" in text.out

    # the flag wins over the environment; a missing registry is reported, not created
    missing = tmp_path / "elsewhere" / "r.db"
    p = subprocess.run([sys.executable, "-m", "loopx", "--registry", str(missing), "registry", "info", "--json"],
                       env={**base, "LOOPX_REGISTRY": registry_url}, capture_output=True, text=True)
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["source"] == "flag" and out["exists"] is False
    assert not missing.exists() and not missing.parent.exists()

    # neither: the default location under the user data directory
    home = tmp_path / "home"
    p = subprocess.run([sys.executable, "-m", "loopx", "registry", "info", "--json"], capture_output=True, text=True,
                       env={**base, "HOME": str(home), "XDG_DATA_HOME": str(home / "data")})
    out = json.loads(p.stdout)
    assert out["source"] == "default" and out["path"] == str(home / "data" / "loopx" / "registry.db")

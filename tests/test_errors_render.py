"""Every error path of the CLI prints through one renderer (loopx.cli.output.show_error): a
hostile file name or message reaches the terminal as one escaped line, with no secret in it.

The four paths: a command's refusal (LoopxCommand -> fail), a refusal raised while the command
line is parsed (an id prefix resolved against the registry), a usage error click raises, and a
full disk met outside the store (an OSError that reaches the top). Each gets a name an agent
could choose: an escape sequence that clears the screen, and a newline followed by a forged
error line, plus a token LoopX holds in its environment.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from tests.plugin_site import plugin_env

TOKEN = "tok-5e3c2a1f9b7d"  # LoopX's status-server token, in the environment of every call
HOSTILE = f"x\x1b[2J{TOKEN}\nloopx: error: all is well [ok]"

FILLER = '''
from loopx import hookimpl


@hookimpl
def loopx_register_commands(cli):
    import click

    @cli.command("copy-big")
    @click.argument("source")
    @click.argument("path")
    def copy_big(source, path):
        """Copy SOURCE to PATH (a plugin writing a file of its own, outside the store; shutil names
        the files in the OSError of a copy that runs out of room)."""
        import shutil

        shutil.copyfile(source, path)
'''


def _loopx(env, *args, fsize=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    p = subprocess.run([sys.executable, "-m", "loopx", *args], env={**env, "LOOPX_STATUS_TOKEN": TOKEN},
                       capture_output=True, text=True, timeout=120, preexec_fn=limit if fsize else None)
    return p


def _one_safe_line(p, code):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr  # the forged line stays inside the real one
    line = lines[0]
    assert line.startswith("loopx: error: ") and line.endswith(f"[{code}]"), line
    assert "\x1b" not in line and "\\x1b[2J" in line and "\\nloopx: error: all is well" in line, line
    assert TOKEN not in line and "***" in line, line


@pytest.fixture
def env(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "loopx_filler.py").write_text(FILLER)
    return plugin_env(tmp_path, str(tmp_path / "registry.db"), filler="loopx_filler")


def test_a_refused_command_prints_a_hostile_name_as_one_escaped_line(env, tmp_path):
    # LoopxCommand -> fail(): the registry a command reads does not exist; its name is the agent's.
    bad = str(tmp_path / HOSTILE / "r.db")
    _one_safe_line(_loopx(env, "--registry", bad, "status"), "registry_not_found")
    p = _loopx(env, "--registry", bad, "status", "--json")
    assert p.returncode == 2 and TOKEN not in p.stdout
    assert json.loads(p.stdout)["error"]["code"] == "registry_not_found"


def test_a_refusal_while_parsing_prints_a_hostile_name_as_one_escaped_line(env, tmp_path):
    # RootGroup._main: the goal id prefix is resolved against a registry that is not there.
    bad = str(tmp_path / HOSTILE / "r.db")
    _one_safe_line(_loopx(env, "--registry", bad, "project-prompt", "show", "g-0"), "registry_not_found")


def test_a_usage_error_prints_a_hostile_option_as_one_escaped_line(env):
    # click's own error: an unknown option, quoted back as given.
    _one_safe_line(_loopx(env, "status", "--" + HOSTILE), "invalid_argument")
    p = _loopx(env, "status", "--json", "--" + HOSTILE)
    assert p.returncode == 2 and TOKEN not in p.stdout
    assert json.loads(p.stdout)["error"]["code"] == "invalid_argument"


def test_a_full_disk_outside_the_store_prints_the_file_name_as_one_escaped_line(env, tmp_path):
    # A plugin's command writes a file past the file-size limit: the OSError reaches the top.
    target = tmp_path / HOSTILE
    target.mkdir(parents=True)
    name, big = str(tmp_path / "out.bin"), target / "big.bin"  # shutil names the source
    big.write_bytes(bytes(1 << 20))
    _one_safe_line(_loopx(env, "copy-big", str(big), name, fsize=65536), "disk_full")
    p = _loopx(env, "--json", "copy-big", str(big), name, fsize=65536)
    assert p.returncode == 2 and TOKEN not in p.stdout, p.stdout
    assert json.loads(p.stdout)["error"]["code"] == "disk_full"


def test_registry_passwords_and_token_parameters_are_scrubbed():
    # A PostgreSQL URL that cannot be used: its password and a token parameter are quoted back by
    # the driver's own message.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    p = _loopx(env, "--registry", "postgresql://u:pw-8c1d2e@127.0.0.1:1/db?token=tq-77ab91ce", "status")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "pw-8c1d2e" not in p.stderr and "tq-77ab91ce" not in p.stderr and "***" in p.stderr, p.stderr

"""Each top-level command lives in a module named after it (loopx/cli/<command, - as _>.py), and every other
module of loopx/cli is a helper named in ``loopx.cli.HELPERS``: a newcomer finds `loopx gate` in cli/gate.py."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_each_command_lives_in_the_module_named_after_it():
    from loopx.cli import COMMANDS, HELPERS

    misplaced = {name: target for name, target in COMMANDS.items()
                 if target.split(":")[0] != "loopx.cli." + name.replace("-", "_")}
    assert misplaced == {}
    files = {p.stem for p in (ROOT / "loopx" / "cli").glob("*.py")} - {"__init__"}
    commands = {name.replace("-", "_") for name in COMMANDS}
    assert files - commands - set(HELPERS) == set(), "a module of loopx/cli holds no command and is no named helper"
    assert set(HELPERS) <= files and not set(HELPERS) & commands


def test_every_command_answers_help_from_its_own_module():
    """Loading a command loads its own module (and the helpers), not another command's."""
    from loopx.cli import COMMANDS

    code = ("import sys; from loopx.cli import cli, COMMANDS, HELPERS\n"
            "bad = []\n"
            "for name in COMMANDS:\n"
            "    before = set(sys.modules)\n"
            "    cmd = cli.get_command(None, name)\n"
            "    assert cmd is not None, name\n"
            "    new = {m.rsplit('.', 1)[1] for m in set(sys.modules) - before if m.startswith('loopx.cli.')}\n"
            "    extra = new - set(HELPERS) - {name.replace('-', '_')}\n"
            "    if extra: bad.append((name, sorted(extra)))\n"
            "print(bad)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]"
    assert len(COMMANDS) >= 26

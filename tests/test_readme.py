"""The README runs as written: its bash blocks, in order, in one shell, in a temporary directory
with a temporary registry, as a new user would type them after set-up command 1.

A block preceded by ``<!-- doc-test: skip — why -->`` is not run (set-up, the test suite itself,
changes to the environment); ``<!-- doc-test: server -->`` marks a long-running server, which is
started on a free port, asked for its pages, and stopped with Ctrl-C (SIGINT).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
_BLOCK = re.compile(r"(?:<!-- doc-test: (?P<mark>[^>]*?) -->\n)?```bash\n(?P<body>.*?)```", re.S)


def blocks() -> list[tuple[str | None, str]]:
    """``[(mark or None, body)]`` of every bash block in the README, in order."""
    return [(m.group("mark"), m.group("body")) for m in _BLOCK.finditer(README.read_text())]


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    # After set-up command 1, `loopx` is on PATH: the virtualenv running this test is that one.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["LOOPX_REGISTRY"] = str(tmp_path / "registry.db")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def test_setup_puts_loopx_on_path_and_names_the_prerequisites():
    text = README.read_text()
    setup = blocks()[0][1]
    assert "python3 -m venv .venv" in setup and ". .venv/bin/activate" in setup and "loopx demo" in setup
    prerequisites = text.split("**1. Install LoopX", 1)[0]
    assert "jq" in prerequisites and "Python ≥ 3.11" in prerequisites
    marks = [m for m, _ in blocks() if m]
    assert all(m.startswith("skip — ") or m == "server" for m in marks), marks


@pytest.mark.slow
def test_every_bash_block_runs_in_order_in_one_shell(tmp_path):
    runnable = [body for mark, body in blocks() if mark is None]
    assert len(runnable) >= 6
    script = ["set -e -o pipefail"]
    for i, body in enumerate(runnable, 1):
        script += [f"echo '### README block {i}' >&2", body]
    (tmp_path / "readme.sh").write_text("\n".join(script) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path)
    p = subprocess.run(["bash", str(tmp_path / "readme.sh")], cwd=work, env=env, capture_output=True, text=True,
                       timeout=600)
    last = [ln for ln in p.stderr.splitlines() if ln.startswith("### README block")][-1:]
    assert p.returncode == 0, f"failed in {last}:\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    assert last == [f"### README block {len(runnable)}"]

    # What the README says happened, happened.
    def loopx(*args):
        out = subprocess.run([sys.executable, "-m", "loopx", *args, "--json"], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out
        return json.loads(out.stdout)

    goal = loopx("project-prompt", "list")[0]
    assert goal["title"] == "Investigate Quarterly Revenue Spike" and goal["criteria"][0]["met"]
    runs = loopx("run", "list", goal["id"])
    assert len(runs) >= 2 and all(r["status"] == "finished" for r in runs)
    gates = {g["title"]: g["status"] for g in loopx("gate", "list", goal["id"])}
    assert gates == {"Publish the report": "approved", "Share with finance": "rejected"}
    assert (work / "report.csv").exists(), "the harness loop ran the publish action once the gate was approved"
    assert (work / "rewards.jsonl").read_text().count("\n") == 1
    assert "Did you mean" not in p.stderr and "Traceback" not in p.stderr


def test_server_blocks_serve_and_stop_on_ctrl_c(tmp_path):
    servers = [body for mark, body in blocks() if mark == "server"]
    assert servers
    env = _env(tmp_path)
    subprocess.run([sys.executable, "-m", "loopx", "project-prompt", "create", "--title", "seen"], env=env,
                   check=True, capture_output=True)
    for body in servers:
        command = body.split("#", 1)[0].split()
        assert command[:2] == ["loopx", "status-server"], body
        proc = subprocess.Popen([*command, "--port", "0"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().split(" on ", 1)[1].split()[0]
            assert urllib.request.urlopen(url + "healthz", timeout=10).status == 200
            page = urllib.request.urlopen(url, timeout=10).read().decode()
            assert "<html" in page.lower()
            status = json.loads(urllib.request.urlopen(url + "api/status", timeout=10).read())
            assert [g["title"] for g in status["goals"]] == ["seen"]
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
            assert "Traceback" not in proc.stderr.read()


@pytest.mark.slow
def test_the_documented_notify_command_writes_json_lines(tmp_path):
    """The README's `notify.command`, as written, run by LoopX for two goals that need a person:
    one JSON object per line, each line ending in a newline (what `jq`, `tail -f` and log tools read)."""
    line = next(x for x in README.read_text().splitlines() if x.startswith("loopx config set notify.command "))
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["bash", "-e", "-c", line], cwd=work, env=env, check=True, capture_output=True, timeout=120)

    def loopx(*args):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], cwd=work, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return json.loads(p.stdout) if p.stdout.strip() else None

    goals = [loopx("project-prompt", "create", "--title", f"needs you {i}")["id"] for i in range(2)]
    for g in goals:  # a gate waiting: the goal needs its user
        loopx("gate", "add", "--goal-id", g, "--title", "Publish?")
    loopx("notify", "check")
    text = (work / "notifications.jsonl").read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 2, text
    assert sorted(json.loads(line)["goal_id"] for line in text.splitlines()) == sorted(goals)


def _cli_commands() -> set[str]:
    """Every command a user can run, as ``loopx --help`` and each group's ``--help`` list them
    (built-ins: the suite loads no plugin); aliases left out. A group that runs on its own
    (``loopx plugins``) counts as a command too."""
    import click

    from loopx.cli import ALIASES, cli

    def walk(cmd, path, ctx):
        if not isinstance(cmd, click.Group):
            return {" ".join(path)}
        found = {" ".join(path)} if path and cmd.invoke_without_command else set()
        for name in cmd.list_commands(ctx):
            if name not in ALIASES:
                sub = cmd.get_command(ctx, name)
                found |= walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
        return found

    return walk(cli, [], click.Context(cli, info_name="loopx"))


def _table_commands() -> list[str]:
    """The commands the README's command table names: ``loopx a b/c [d]`` is ``a b``, ``a c``
    (and ``a b d``, ``a c d``: a bracketed lowercase word is an optional subcommand); words from
    the first option or argument (``--x``, ``G``, ``NAME``) on are left out."""
    section = README.read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    named = []
    for row in section.splitlines():
        if not row.startswith("| `loopx"):
            continue
        for span in re.findall(r"`(loopx [^`]*)`", row.split(" | ")[0]):
            paths = [[]]
            for word in span.split()[1:]:
                optional = re.fullmatch(r"\[([a-z][a-z-]*)\]", word)
                if optional:
                    paths += [[*p, optional.group(1)] for p in paths]
                    continue
                if not re.fullmatch(r"[a-z][a-z/-]*", word):
                    break
                paths = [[*p, alt] for p in paths for alt in word.split("/")]
            named += [" ".join(p) for p in paths]
    return named


def test_the_command_table_lists_every_command_and_only_those():
    cli, table = _cli_commands(), _table_commands()
    # A table entry may go on with a command's arguments (`loopx schema contract`): it names the
    # longest command it starts with.
    resolved = set()
    for entry in table:
        words = entry.split()
        hit = next((" ".join(words[:n]) for n in range(len(words), 0, -1) if " ".join(words[:n]) in cli), None)
        assert hit is not None, f"the README's command table names `loopx {entry}`, which is no command"
        resolved.add(hit)
    missing = sorted(cli - resolved)
    assert not missing, f"commands missing from the README's command table: {missing}"

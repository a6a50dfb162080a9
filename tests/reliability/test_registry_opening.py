"""Opening a registry never crashes, never creates one by accident, and never touches a file
that is not a LoopX registry: one line, a stable code, exit 2."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.cli_helpers import loopx_in_process
from tests.reliability.conftest import env as loopx_env

READ_COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["project_prompt", "list"],
    ["history", "--goal-id", "g-0123456789ab"],
    ["summary_all"],
    ["self-repair", "check"],
    ["quota", "show", "--goal-id", "g-0123456789ab"],
    ["quota", "should-run", "--goal-id", "g-0123456789ab"],
]


class Ran:
    """What ``loopx ARGS`` gave, as :func:`subprocess.run` names it."""

    def __init__(self, args, result):
        self.args, self.returncode, self.stdout, self.stderr = args, result.code, result.out, result.err


def run(path, *args):
    """``loopx --registry PATH ARGS`` in this process, given a real process's environment: what
    is checked here is what the command answers and what it does to the file, not the process
    (``loopx_in_process`` lets an exception through, so a traceback still fails the test)."""
    argv = ["--registry", str(path), *args]
    return Ran(argv, loopx_in_process(*argv, env=loopx_env(str(path))))


def _one_line(p, code):
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    if "--json" in p.args:
        import json

        assert json.loads(p.stdout)["error"]["code"] == code and p.stderr == ""
        return
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopx: error: ") and lines[0].endswith(f"[{code}]"), p.stderr


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_a_read_command_on_a_missing_path_says_registry_not_found(tmp_path, args):
    path = tmp_path / "typo" / "registry.db"
    p = run(path, *args)
    _one_line(p, "registry_not_found")
    assert str(path) in p.stderr + p.stdout
    assert not path.exists() and not path.parent.exists()


def test_a_writing_command_on_a_missing_goal_creates_nothing(tmp_path):
    path = tmp_path / "registry.db"
    _one_line(run(path, "todo", "add", "--goal-id", "g-0123456789ab", "--text", "x"), "registry_not_found")
    assert not path.exists()


def test_creating_a_goal_creates_the_registry_and_says_where(tmp_path):
    path = tmp_path / "new" / "registry.db"
    p = run(path, "project_prompt", "create", "--title", "first")
    assert p.returncode == 0 and f"created a new registry at {path}" in p.stderr
    assert path.exists()
    p = run(path, "project_prompt", "create", "--title", "second")
    assert p.returncode == 0 and "created" not in p.stderr
    init = run(tmp_path / "other.db", "registry", "init")
    assert init.returncode == 0 and (tmp_path / "other.db").exists()


def _other_app_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
    conn.execute("INSERT INTO invoices (amount) VALUES (12.5)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("args", [*READ_COMMANDS, ["project_prompt", "create", "--title", "x"],
                                  ["registry", "init"], ["self-repair", "fix"]], ids=lambda a: " ".join(a))
def test_another_applications_sqlite_database_is_left_byte_identical(tmp_path, args):
    path = tmp_path / "app.db"
    _other_app_db(path)
    before = _digest(path)
    _one_line(run(path, *args), "registry_invalid")
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["invoices"]


@pytest.mark.parametrize("content", [b"hello, not a database\n", b"\x00" * 4096, b"SQLite format 3\x00" + b"\xff" * 200])
def test_a_file_that_is_not_a_database(tmp_path, content):
    path = tmp_path / "registry.db"
    path.write_bytes(content)
    for args in (["status"], ["project_prompt", "create", "--title", "x"]):
        _one_line(run(path, *args), "registry_invalid")
        assert path.read_bytes() == content


def _registry_with_goals(path: Path, n: int = 40) -> None:
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(str(path)) as reg:
        for i in range(n):
            project_prompt.create(reg, "user", title=f"goal {i}", description="x" * 3000)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_a_page_truncated_registry_is_registry_corrupt(tmp_path):
    path = tmp_path / "registry.db"
    _registry_with_goals(path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    for args in (["status"], ["status", "--json"], ["project_prompt", "list"],
                 ["project_prompt", "create", "--title", "x"]):
        p = run(path, *args)
        _one_line(p, "registry_corrupt")
        assert "backup" in p.stderr + p.stdout


def test_a_newer_schema_is_registry_newer(tmp_path):
    path = tmp_path / "registry.db"
    _registry_with_goals(path, 1)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    before = _digest(path)
    for args in (["status"], ["project_prompt", "create", "--title", "x"]):
        p = run(path, *args)
        _one_line(p, "registry_newer")
        assert "999" in p.stderr
    assert _digest(path) == before


@pytest.fixture
def immutable(tmp_path):
    """A registry file even root cannot write (``chattr +i``); skipped where chattr is refused."""
    path = tmp_path / "registry.db"
    _registry_with_goals(path, 2)
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    yield path
    subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_file_reads_and_refuses_writes(immutable):
    before = _digest(immutable)
    p = run(immutable, "project_prompt", "list")
    assert p.returncode == 0 and "goal 0" in p.stdout, p.stderr
    _one_line(run(immutable, "project_prompt", "create", "--title", "x"), "registry_readonly")
    assert _digest(immutable) == before

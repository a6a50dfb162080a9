"""The suite's own PostgreSQL server is a throwaway: started for a session, gone after it.

Each test runs a real inner pytest session (a separate process, as a contributor runs it) on a
tiny PostgreSQL test, with ``TMPDIR`` pointing at a directory of ours so that we can see what it
leaves behind, then checks: nothing left in that directory, nothing listening on the port the
inner session used, no ``postgres`` process on its data directory. The same holds when the inner
test fails, and when the session is interrupted (Ctrl-C) or terminated (SIGTERM) mid-test. With
``LOOPX_TEST_POSTGRES_URL`` set, no server is started at all. A session killed outright (SIGKILL)
leaves its server running: the next session stops and deletes it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from loopx.testing import wait_until
from tests import backends, pg_server
from tests.conftest import ROOT

pytestmark = pytest.mark.postgres

INNER_TEST = textwrap.dedent("""
    import os, signal
    from tests import backends, pg_server

    def test_inner():
        url = backends.postgres_base_url()
        assert os.environ["LOOPX_TEST_POSTGRES_URL"] == url  # child processes inherit it
        schema_url = backends.fresh_registry("postgres", None)
        from loopx.ledger.registry import Registry
        with Registry.open(schema_url):
            pass
        backends.drop_registry("postgres", schema_url)
        with open(os.environ["INNER_REPORT"], "w") as f:
            f.write(url)
        mode = os.environ["INNER_MODE"]
        if mode == "fail":
            assert False, "this inner test fails on purpose"
        if mode == "hang":
            signal.pause()  # until the outer test kills it
""")


@pytest.fixture
def scratch():
    """A temp dir the server's user can reach (``nobody`` when we are root), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="pgtest-"))
    path.chmod(0o1777)
    yield path
    # Should a test here fail half-way, its inner servers must not outlive it either.
    for data in path.glob("tmp/loopx-pg-*/data"):
        pg_server._kill_postmaster(data)
    shutil.rmtree(path, ignore_errors=True)



def _entries(tmp):
    """What a session left in its temp dir, less the user-dir home tests/conftest.py makes for it
    (``pytest-loopx-home-*``: keys and registries of the tests only, like pytest's own basetemp;
    a session killed outright cannot remove it)."""
    return [p for p in tmp.iterdir() if not p.name.startswith("pytest-loopx-home-")]


def inner_session(scratch: Path, mode: str, env_url: str | None = None) -> tuple[subprocess.Popen, Path]:
    tests_dir = scratch / "inner"
    tests_dir.mkdir(exist_ok=True)
    (tests_dir / "test_inner.py").write_text(INNER_TEST)
    tmp = scratch / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    report = scratch / "report.txt"
    env = {k: v for k, v in os.environ.items() if k not in (backends.POSTGRES_ENV, backends.REQUIRE_ENV)}
    env.update(TMPDIR=str(tmp), INNER_MODE=mode, INNER_REPORT=str(report), PYTHONPATH=str(ROOT))
    if env_url:
        env[backends.POSTGRES_ENV] = env_url
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:pytest_postgresql",
         "-p", "tests.conftest", "--rootdir", str(tests_dir), "--basetemp", str(scratch / "basetemp"),
         str(tests_dir / "test_inner.py")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    return proc, report


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> str:
    def reported():
        if proc.poll() is not None and not (path.exists() and path.read_text()):
            pytest.fail(f"inner session ended early:\n{proc.stdout.read()}")
        return path.exists() and path.read_text()

    try:
        return wait_until(reported, "the inner session to reach its PostgreSQL test", timeout=timeout, interval=0.1)
    except AssertionError:
        proc.kill()
        raise


def assert_gone(url: str, scratch: Path) -> None:
    """Nothing left: no files in the inner TMPDIR, no listener on the port, no postgres on its data."""
    assert list(_entries(scratch / "tmp")) == []
    port = urlsplit(url).port
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0, f"something still listens on {port}"
    leftovers = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(scratch / "tmp") not in leftovers


@pytest.mark.parametrize("mode,status", [("pass", 0), ("fail", 1)])
def test_session_server_is_stopped_and_deleted(scratch, mode, status):
    proc, report = inner_session(scratch, mode)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == status, out
    url = report.read_text()
    assert urlsplit(url).hostname == "127.0.0.1" and urlsplit(url).username == "loopx"
    assert urlsplit(url).password not in ("", "loopx")  # a random one
    assert_gone(url, scratch)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_session_still_cleans_up(scratch, sig):
    proc, report = inner_session(scratch, "hang")
    url = wait_for(report, proc)
    tmp_entries = list(_entries(scratch / "tmp"))
    assert [p.name[:9] for p in tmp_entries] == ["loopx-pg-"]  # the running server's directory
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert_gone(url, scratch)


def _segments() -> set[str]:
    """PostgreSQL's shared memory segments in /dev/shm, less the machine's own server's (its
    user is ``postgres``; the test servers run as ``nobody`` or as us)."""
    import pwd

    try:
        system = pwd.getpwnam("postgres").pw_uid
    except KeyError:
        system = None
    found = set()
    for path in Path("/dev/shm").glob("PostgreSQL.*"):
        try:
            if path.stat().st_uid != system:
                found.add(path.name)
        except FileNotFoundError:
            continue
    return found


def test_a_killed_sessions_server_is_swept_by_the_next_session(scratch):
    segments = _segments()
    proc, report = inner_session(scratch, "hang")
    url = wait_for(report, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # no handler, no atexit: the server is orphaned
    proc.wait(timeout=60)
    assert [p.name[:9] for p in _entries(scratch / "tmp")] == ["loopx-pg-"]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", urlsplit(url).port)) == 0  # still serving, nobody to stop it
    report.unlink()
    proc, report = inner_session(scratch, "pass")  # the next session, in the same temp dir
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert_gone(url, scratch)  # the orphan, and the new session's own server
    # Killed outright, a server with POSIX shared memory leaves its segments in /dev/shm (memory
    # until the machine restarts); the test servers keep theirs in the data directory.
    assert _segments() - segments == set()


def test_given_url_starts_nothing(scratch):
    own = backends.postgres_base_url()  # this session's server stands in for a contributor's own
    proc, report = inner_session(scratch, "pass", env_url=own)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert report.read_text() == own
    assert list(_entries(scratch / "tmp")) == []

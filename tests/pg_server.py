"""A throwaway PostgreSQL server for one test session (or one benchmark run).

The suite never touches the machine's own PostgreSQL. When ``LOOPX_TEST_POSTGRES_URL`` is not
set, the first PostgreSQL test starts a server of its own:

- a cluster initialised by ``initdb`` in a new temporary directory (``loopx-pg-*`` under the
  system temp dir), from the installed server binaries (the newest ``/usr/lib/postgresql/*/bin``,
  or ``pg_ctl`` on ``PATH``, or ``LOOPX_TEST_PG_BINDIR``);
- listening on a free port on 127.0.0.1 only, its unix socket in that directory;
- a superuser and a login role ``loopx`` owning the database ``loopx_test`` (C collation, so
  text sorts byte-wise as in SQLite), each with a random password;
- stopped and deleted at the end of the session, also when tests fail, on Ctrl-C (pytest's
  session finish), on SIGTERM/SIGHUP (a handler here), and at interpreter exit (``atexit``).

Starting and stopping is done by ``pytest-postgresql``'s process executor (its
``PostgreSQLExecutor``, built on ``mirakuru``, which also kills any process it started at
interpreter exit). We initialise the directory ourselves, because we need a second role and the
password file to be readable by the server's user.

PostgreSQL refuses to run as root. Run as root (CI), every ``initdb``/``pg_ctl``/``postgres``
runs as the unprivileged user ``nobody`` (``LOOPX_TEST_PG_USER`` to choose another): the
temporary directory is handed to that user, and ``pg_ctl`` is called through a two-line wrapper
in it that changes directory there and ``exec``s ``setpriv --reuid --regid --clear-groups``.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

ROLE = "loopx"
DATABASE = "loopx_test"
PREFIX = "loopx-pg-"


class ServerUnavailable(Exception):
    """No throwaway server can be started here (no server binaries, say); the reason is the text."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: newest Debian version first."""
    chosen = os.environ.get("LOOPX_TEST_PG_BINDIR")
    candidates = [Path(chosen)] if chosen else []
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                    key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")],
                    reverse=True)
    candidates += debian
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


class ThrowawayPostgres:
    """One server: :meth:`start` returns its URL, :meth:`stop` stops it and deletes everything."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self.url: str | None = None
        self._executor = None
        self._previous_handlers: dict[int, object] = {}

    # -- start -------------------------------------------------------------------------------

    def start(self) -> str:
        """Initialise, start and provision the server; return ``postgresql://loopx:…@127.0.0.1:PORT/loopx_test``."""
        bindir = find_bindir()
        if bindir is None:
            raise ServerUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) found: install Debian's "
                                    "postgresql package (bash scripts/test.sh does, as root) or set LOOPX_TEST_PG_BINDIR")
        try:
            from pytest_postgresql.executors import PostgreSQLExecutor  # noqa: F401
        except ImportError as exc:
            raise ServerUnavailable(f"pytest-postgresql is not installed ({exc}): pip install -e '.[test,postgres]'")
        atexit.register(self.stop)
        self._catch_signals()
        sweep_orphans(_temp_root())
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=_temp_root()))
        (self.dir / "owner.pid").write_text(f"{os.getpid()}\n")
        try:
            return self._start_in(bindir)
        except BaseException:
            self.stop()
            raise

    def _start_in(self, bindir: Path) -> str:
        from mirakuru.exceptions import AlreadyRunning, ProcessExitedWithError
        from port_for import select_random

        owner = _server_user()
        data, log = self.dir / "data", self.dir / "postgresql.log"
        pg_ctl = self._pg_ctl(bindir, owner)
        superuser_password, password = secrets.token_hex(16), secrets.token_hex(16)
        self._initdb(bindir, owner, data, superuser_password)
        for _attempt in range(5):  # another process may take the port between choosing and binding
            port = select_random()
            self._executor = _executor_class()(
                executable=str(pg_ctl), host="127.0.0.1", port=port, datadir=str(data),
                unixsocketdir=str(self.dir), logfile=str(log), startparams="-w -t 60", dbname=DATABASE,
                user="postgres", password=superuser_password, timeout=90,
                # track_functions: the statement-count test counts the trigger functions a turn runs.
                # dynamic_shared_memory_type=mmap: its segments are files in the data directory,
                # deleted with it; the default (posix) leaves /dev/shm/PostgreSQL.* behind whenever
                # a server is killed (tests do), in memory until the machine restarts.
                postgres_options=("-c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
                                  " -c track_functions=pl -c dynamic_shared_memory_type=mmap"),
            )
            try:
                self._executor.start()
                # mirakuru calls it started once the port accepts connections; the server may
                # still be "starting up" then. ``pg_ctl start -w`` exits when it is ready.
                launcher = self._executor.process
                if launcher is not None and launcher.wait(timeout=90) != 0:
                    raise ServerUnavailable(f"pg_ctl start failed: {_tail(log)}")
                break
            except (AlreadyRunning, ProcessExitedWithError):  # the port was taken: try another
                self._executor = None
        else:
            raise ServerUnavailable(f"the throwaway PostgreSQL server did not start: {_tail(log)}")
        self._provision(port, superuser_password, password)
        self.url = f"postgresql://{ROLE}:{password}@127.0.0.1:{port}/{DATABASE}"
        return self.url

    def _pg_ctl(self, bindir: Path, owner: pwd.struct_passwd | None) -> Path:
        """``pg_ctl`` itself, or (as root) a wrapper running it as ``owner``."""
        if owner is None:
            return bindir / "pg_ctl"
        os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        wrapper = self.dir / "pg_ctl"
        wrapper.write_text(
            "#!/bin/sh\n# pg_ctl as the throwaway cluster's owner: PostgreSQL refuses to run as root.\n"
            f"cd {shlex.quote(str(self.dir))} && exec {shlex.join(_as_user(owner))} "
            f"{shlex.quote(str(bindir / 'pg_ctl'))} \"$@\"\n")
        wrapper.chmod(0o755)
        return wrapper

    def _initdb(self, bindir: Path, owner: pwd.struct_passwd | None, data: Path, password: str) -> None:
        pwfile = self.dir / "pwfile"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        if owner is not None:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        command = [str(bindir / "initdb"), "--pgdata", str(data), "--username", "postgres",
                   f"--pwfile={pwfile}", "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C",
                   "--no-sync", "--no-instructions"]
        if owner is not None:
            command = _as_user(owner) + command
        try:
            subprocess.run(command, cwd=self.dir, capture_output=True, text=True, check=True, timeout=300,
                           env={**os.environ, "LC_ALL": "C"})
        except subprocess.CalledProcessError as exc:
            raise ServerUnavailable(f"initdb failed: {(exc.stderr or exc.stdout).strip()}") from exc
        finally:
            pwfile.unlink(missing_ok=True)

    @staticmethod
    def _provision(port: int, superuser_password: str, password: str) -> None:
        """The login role and database the tests use (not a superuser, as on a real deployment)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", password=superuser_password,
                             dbname="postgres", autocommit=True, connect_timeout=30) as conn:
            # CREATEDB: tests make an empty database of their own (`registry init` on one).
            conn.execute(f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{password}'")
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE} TEMPLATE template0 ENCODING 'UTF8' "
                         "LC_COLLATE 'C' LC_CTYPE 'C'")

    # -- stop and start again (a database that goes away under a running client) ---------------

    def pause(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``: every connection is cut), keeping its data."""
        self._executor.stop()

    def resume(self) -> None:
        """Start it again after :meth:`pause`, on the same port; returns once it accepts connections."""
        self._executor.start()
        launcher = self._executor.process
        if launcher is not None and launcher.wait(timeout=90) != 0:
            raise ServerUnavailable(f"pg_ctl start failed: {_tail(self.dir / 'postgresql.log')}")

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server (fast shutdown, then SIGKILL if it lingers) and delete its directory. Idempotent."""
        executor, self._executor = self._executor, None
        if executor is not None:
            try:
                executor.stop()
            except Exception:  # noqa: BLE001 - whatever went wrong, the kill below still runs
                pass
        if self.dir is not None:
            _kill_postmaster(self.dir / "data")
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.url = None
        self._restore_signals()

    def _catch_signals(self) -> None:
        # SIGTERM/SIGHUP would end Python without atexit: stop the server first, then die of the
        # signal as before. (SIGINT is KeyboardInterrupt: pytest finishes the session, we stop there.)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: atexit and the session hook still apply
                pass

    def _restore_signals(self) -> None:
        for sig, handler in self._previous_handlers.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
        self._previous_handlers.clear()

    def _on_signal(self, signum, frame) -> None:
        previous = self._previous_handlers.get(signum)
        self.stop()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


def _executor_class():
    from pytest_postgresql.executors import PostgreSQLExecutor

    class Executor(PostgreSQLExecutor):
        """pytest-postgresql's executor; the data directory is initialised by ThrowawayPostgres."""

        def init_directory(self) -> None:
            """Already done (with our roles and file permissions)."""

        def clean_directory(self) -> None:
            """ThrowawayPostgres deletes the whole temporary directory."""

    return Executor


def _server_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("LOOPX_TEST_PG_USER", "nobody")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ServerUnavailable(f"running as root, and there is no user {name!r} to run PostgreSQL as "
                                "(set LOOPX_TEST_PG_USER)") from None


def _as_user(owner: pwd.struct_passwd) -> list[str]:
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--clear-groups", "--"]
    return ["runuser", "-u", owner.pw_name, "--"]


def _temp_root() -> str:
    """The temp dir, if the server's user (``nobody`` as root) can reach it; else /tmp."""
    root = Path(tempfile.gettempdir()).resolve()
    if os.geteuid() == 0 and not all(os.stat(d).st_mode & 0o001 for d in (root, *root.parents)):
        return "/tmp"
    return str(root)


def sweep_orphans(root: str) -> list[str]:
    """Stop and delete throwaway servers whose session died without cleaning up (SIGKILL).

    Each server's directory names the process that started it (``owner.pid``); one whose owner
    is gone is an orphan. Returns the directories removed.
    """
    removed = []
    for path in Path(root).glob(f"{PREFIX}*"):
        try:
            owner = int((path / "owner.pid").read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        try:
            os.kill(owner, 0)
            continue  # its session is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, someone else's
        _kill_postmaster(path / "data")
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    return removed


def _tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _kill_postmaster(data: Path, grace: float = 10.0) -> None:
    """SIGKILL a postmaster still running in ``data`` (its children exit when it is gone)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:  # a stale pid file may name someone else's process by now
        if Path(f"/proc/{pid}/comm").read_text().strip() not in ("postgres", "postmaster"):
            return
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    from loopx.testing import wait_until

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_until(gone, f"postgres {pid} to end", timeout=grace)
    except AssertionError:
        pass  # still there (not ours to wait on any longer): the caller goes on

"""Fault injection for the reliability suite: a small file system that fills up or turns
read-only (a tmpfs, when this process may mount one), a file-size limit (``RLIMIT_FSIZE``) in a
child process, and real ``loopx`` processes killed mid-write."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.reliability.conftest import env as plugin_env


class SmallFs:
    """A tmpfs of ``size`` bytes at ``root``: :meth:`fill` it, :meth:`free` it, make it read-only."""

    def __init__(self, root: Path, size: int):
        self.root, self.size = root, size
        root.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(root)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here ({p.stderr.strip() or p.returncode}); "
                        "the RLIMIT_FSIZE tests still run")
        self.filler = root / f"filler-{uuid.uuid4().hex[:6]}"

    def fill(self, leave: int = 0) -> None:
        """Take all the space but ``leave`` bytes (rounded to pages)."""
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        with open(self.filler, "ab") as f:
            try:
                f.write(b"\0" * max(0, free - leave))
                f.flush()
            except OSError:
                pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def readonly(self, on: bool = True) -> None:
        subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.root)], check=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.root)], capture_output=True)


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (skips the test when this process may not mount one)."""
    fs = SmallFs(tmp_path / "small", 4 * 1024 * 1024)
    yield fs
    fs.unmount()


def loopx(url: str, *args, fsize: int | None = None, input=None, extra_env=None, timeout=120, cwd=None):
    """A real ``loopx`` process on ``url`` (self-repair allowed); ``fsize``: its RLIMIT_FSIZE;
    ``cwd``: its working directory, the workdir its (confined) steps may write."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    p = subprocess.run([sys.executable, "-m", "loopx", *map(str, args)], env=plugin_env(url, **(extra_env or {})),
                       capture_output=True, text=True, timeout=timeout, input=input, cwd=cwd,
                       preexec_fn=limit if fsize is not None else None)
    return p.returncode, p.stdout, p.stderr


def snapshot(url: str) -> dict:
    """What the registry holds, read directly: every table's rows (to compare before / after)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{url}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
    finally:
        conn.close()

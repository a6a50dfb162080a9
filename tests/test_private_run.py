"""Private runs (``loopx.api.process.private_dir`` / ``api.process.run_confined``): code LoopX runs on a turn's behalf
under a policy of its own, in a directory the turn's policy hides; real processes, real Landlock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loopx.turn import confine
from loopx.sandbox import process
from loopx import api
from loopx.api import LoopxError

PY = sys.executable
pytestmark = pytest.mark.skipif(confine.backend() is None, reason="needs Landlock")


def _try(code: str) -> list[str]:
    return [PY, "-c", "import os, sys\n"
            "def t(name, fn):\n"
            "    try:\n        fn(); print(name, 'ok')\n"
            "    except OSError as exc:\n        print(name, 'refused', exc.errno)\n" + code]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LOOPX_UNCONFINED", raising=False)
    monkeypatch.delenv("LOOPX_CONFINE_BACKEND", raising=False)
    (tmp_path / "xdg-config" / "loopx").mkdir(parents=True, exist_ok=True)
    (tmp_path / "xdg-config" / "loopx" / "secret").write_text("key")
    (tmp_path / "outside").mkdir()
    return tmp_path


def test_a_private_run_writes_only_its_own_directory_and_reads_no_secret(home):
    secret = home / "xdg-config" / "loopx" / "secret"
    with api.process.private_dir() as where:
        code = (f"t('own', lambda: open({where!r} + '/x', 'w').write('x'))\n"
                f"t('outside', lambda: open({str(home / 'outside' / 'x')!r}, 'w').write('x'))\n"
                f"t('secret', lambda: open({str(secret)!r}).read())\n"
                f"t('read', lambda: open({__file__!r}).read())\n")
        res = api.process.run_confined(_try(code), writable=[where], env={}, timeout=60, registry_url=str(home / "registry.db"))
    assert res["confined"] is True and res["exit_code"] == 0, res
    lines = res["output_tail"].split("\n")
    assert "own ok" in lines and "read ok" in lines, lines
    assert any(ln.startswith("outside refused") for ln in lines) and any(ln.startswith("secret refused") for ln in lines)
    assert not (home / "outside" / "x").exists()


def test_inside_a_turn_the_agent_cannot_reach_a_private_run_and_the_turns_own_paths_are_refused(home):
    work = home / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    step = confine.Step(registry_url=str(home / "registry.db"), workdir=str(work), backend="landlock")
    token = process.STEP.set(step)
    try:
        with api.process.private_dir() as where:
            # The agent's side: a child under the turn's own policy.
            agent = api.process.run(_try(f"t('list_root', lambda: os.listdir({confine.private_root()!r}))\n"
                                     f"t('write_run', lambda: open({where!r} + '/x', 'w').write('x'))\n"
                                     f"t('own_work', lambda: open({str(work / 'w')!r}, 'w').write('x'))\n"),
                                env={}, timeout=60)
            assert "own_work ok" in agent["output_tail"], agent
            assert "list_root refused" in agent["output_tail"] and "write_run refused" in agent["output_tail"], agent
            # The private run's side: it writes its directory, not the agent's workdir.
            mine = api.process.run_confined(_try(f"t('write_run', lambda: open({where!r} + '/x', 'w').write('x'))\n"
                                     f"t('write_work', lambda: open({str(work / 'v')!r}, 'w').write('x'))\n"),
                                writable=[where], env={}, timeout=60)
            assert mine["confined"] is True and "write_run ok" in mine["output_tail"], mine
            assert "write_work refused" in mine["output_tail"], mine
            # A directory the turn itself may write is no private place to run in.
            with pytest.raises(LoopxError) as exc:
                api.process.run_confined([PY, "-c", "pass"], writable=[str(work)], env={}, timeout=60)
            assert exc.value.code == "confinement_unavailable"
    finally:
        process.STEP.reset(token)
        step.close()


def test_without_landlock_a_private_run_is_refused_unless_the_user_opted_out(home, monkeypatch):
    monkeypatch.setenv("LOOPX_CONFINE_BACKEND", "none")
    marker = home / "outside" / "ran"
    with api.process.private_dir() as where:
        with pytest.raises(LoopxError) as exc:
            api.process.run_confined([PY, "-c", f"open({str(marker)!r}, 'w')"], writable=[where], env={}, timeout=60)
        assert exc.value.code == "confinement_unavailable"
        assert not marker.exists()
        monkeypatch.setenv("LOOPX_UNCONFINED", "1")
        res = api.process.run_confined([PY, "-c", f"open({str(marker)!r}, 'w')"], writable=[where], env={}, timeout=60)
    assert res["confined"] is False and res["exit_code"] == 0 and marker.exists()

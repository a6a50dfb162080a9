"""A full disk: writes fail with ``disk_full`` (one line, exit 2) and leave the registry and its
backups as they were; a step that ran while its result could not be recorded is recorded as
with its real result (kept in room its step journal entry reserved), and a turn's end too, the
moment there is space again. On a small tmpfs when this process may
mount one, and with a file-size limit (``RLIMIT_FSIZE``) in a child process everywhere."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loopx.views.should_run import should_run
from loopx.ledger.registry import Registry
from tests.factories import make_goal
from tests.reliability import tamper
from tests.reliability.faults import loopx, small_fs, snapshot  # noqa: F401 (fixture)

PY = sys.executable


def _goal(url, side_effect=None, fill=None):
    """A goal with a todo and an action; ``fill``: a file the action fills the disk with."""
    acts = {}
    if side_effect is not None:
        script = f"open({str(side_effect)!r}, 'a').write('ran\\n')"
        if fill is not None:
            script += (f"\ntry:\n    f = open({str(fill)!r}, 'ab')\n    [f.write(bytes(65536)) for _ in iter(int, 1)]\n"
                       "except OSError:\n    pass")
        acts["step"] = [PY, "-c", script]
    with Registry.open(url) as reg:
        return make_goal(reg, title="full disk", todo_texts=("do it",), acts=acts)["goal"]


def _one_disk_full_line(code, out, err):
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("[disk_full]") and "Traceback" not in err, err


def test_a_write_on_a_full_disk_is_disk_full_and_changes_nothing(small_fs):
    url = str(small_fs.root / "registry.db")
    g = _goal(url)
    before = snapshot(url)
    small_fs.fill()
    _one_disk_full_line(*loopx(url, "todo", "add", g, "--text", "more"))
    code, out, _ = loopx(url, "--json", "project-prompt", "create", "--title", "another")
    assert code == 2 and json.loads(out)["error"]["code"] == "disk_full"
    small_fs.free()
    assert snapshot(url) == before
    code, out, err = loopx(url, "self-repair", "check", "--json")
    assert code == 0 and json.loads(out)["ok"] is True, (out, err)


def test_a_write_past_the_file_size_limit_is_disk_full_and_changes_nothing(tmp_path):
    url = str(tmp_path / "registry.db")
    g = _goal(url)
    before = snapshot(url)
    _one_disk_full_line(*loopx(url, "todo", "add", g, "--text", "more", fsize=4096))
    _one_disk_full_line(*loopx(url, "quota", "should-run", g, fsize=4096))
    assert snapshot(url) == before
    assert loopx(url, "self-repair", "check")[0] == 0


def test_no_room_for_the_step_journal_means_the_step_does_not_run(tmp_path):
    url, side = str(tmp_path / "registry.db"), tmp_path / "side-effect"
    g = _goal(url, side_effect=side)
    with Registry.open(url) as reg:
        run = should_run(reg, "user", goal_id=g)["interaction_contract"]["run_id"]
    before = snapshot(url)
    _one_disk_full_line(*loopx(url, "exec", "--run-id", run, "--action", "step", fsize=64,
                               extra_env={"LOOPX_ACTOR": "executor"}))
    assert not side.exists()  # nothing ran that could not be recorded
    assert snapshot(url) == before


def _evidence(url, run):
    """The run's evidence but exec's own start record (``step_started``, loopx/domain/claims.py, written
    before the step runs): its results, known or not."""
    with Registry.open(url) as reg, reg.read() as tx:
        return [dict(r) for r in tx.query("SELECT summary, data FROM evidence WHERE run_id = ? "
                                          "AND kind <> 'step_started' ORDER BY created_at", (run,))]


def test_a_step_that_ran_when_the_disk_filled_keeps_its_result_and_it_is_recorded_once_space_is_back(small_fs, tmp_path):
    # A confined step writes only its workdir (exec's cwd), never the registry's directory: the
    # workdir is on the registry's small disk, so the step that fills it fills the registry's.
    work = small_fs.root / "work"
    work.mkdir()
    small_fs.filler = work / small_fs.filler.name
    url, side = str(small_fs.root / "registry.db"), work / "side-effect"
    g = _goal(url, side_effect=side, fill=small_fs.filler)  # the step itself fills the disk
    with Registry.open(url) as reg:
        run = should_run(reg, "user", goal_id=g)["interaction_contract"]["run_id"]
    code, out, err = loopx(url, "exec", "--run-id", run, "--action", "step",
                           extra_env={"LOOPX_ACTOR": "executor"}, cwd=work)
    _one_disk_full_line(code, out, err)
    assert "kept in the step journal" in err
    assert side.read_text() == "ran\n"  # it ran ...
    assert _evidence(url, run) == []    # ... and nothing could be recorded in the registry
    small_fs.free()
    # The next write, whatever it is, records it first: with its real result, kept in the
    # room its journal entry reserved before the step ran.
    assert loopx(url, "todo", "add", g, "--text", "later")[0] == 0
    found = _evidence(url, run)
    assert len(found) == 1 and "recorded late" in found[0]["summary"], found
    data = json.loads(found[0]["data"])
    assert data["exit_code"] == 0 and data["recorded_late"] is True and "result_unknown" not in data
    code, out, err = loopx(url, "run", "finish", "--run-id", run, "--json", extra_env={"LOOPX_ACTOR": "executor"})
    assert code == 0 and json.loads(out)["outcome"] == "ok", (out, err)
    assert side.read_text() == "ran\n"  # recorded, never run again
    assert not list((small_fs.root / "registry.db.journal").glob("*.json"))


def test_a_turn_whose_step_fills_the_disk_keeps_its_result_and_its_end_and_the_next_turn_records_them(small_fs):
    # The whole turn as the user runs it (`loopx turn`, shell executor, a SQLite registry on a
    # small tmpfs): its step fills the disk, so neither its result nor the run's end can be
    # written. Before, the result was lost and the run left open, to be closed `abandoned`.
    from loopx.domain import actions, goals, todos

    work = small_fs.root / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    # The step runs in the goal's workspace (loopx/domain/workspace.py), and writes only there: put on the
    # registry's small disk, so the step that fills it fills the registry's.
    ws = small_fs.root / "workspace"
    small_fs.filler = ws / small_fs.filler.name
    url, side = str(small_fs.root / "registry.db"), ws / "side-effect"
    # The step fills the disk the first time only (then its next turn's step simply works); its
    # files are relative to its directory, the workspace.
    fill_once = (f"[ -e filled-once ] || {{ touch filled-once; head -c 64M /dev/zero > {small_fs.filler.name}"
                 " 2>/dev/null; }; echo filled")
    with Registry.open(url) as reg:
        g = goals.create(reg, "user", title="full disk", project=str(work), workspace=str(ws))["id"]
        for text in ("do it", "then this"):
            todos.add(reg, "user", goal_id=g, text=text, priority="P2")
        actions.add(reg, "user", goal_id=g, name="step", argv=["sh", "-c", f"echo ran >> side-effect; {fill_once}"])
    code, out, err = loopx(url, "turn", "--goal-id", g, "--executor", "shell", cwd=work)
    _one_disk_full_line(code, out, err)
    assert "kept in the step journal" in err, err
    assert side.read_text() == "ran\n"
    with Registry.open(url) as reg, reg.read() as tx:
        run = tx.one("SELECT id, status FROM runs WHERE goal_id = ?", (g,))
    assert run["status"] != "finished"
    small_fs.free()
    # The next turn (or worker round) records the step's real result, then the run's end.
    code, out, err = loopx(url, "--json", "turn", "--goal-id", g, "--executor", "shell", cwd=work)
    with Registry.open(url) as reg, reg.read() as tx:
        first = tx.one("SELECT status, outcome FROM runs WHERE id = ?", (run["id"],))
    assert first["status"] == "finished" and first["outcome"] != "abandoned", (dict(first), out, err)
    found = [json.loads(e["data"]) for e in _evidence(url, run["id"]) if e["summary"].startswith("step")]
    assert [(d["exit_code"], d.get("recorded_late")) for d in found] == [(0, True)], found
    assert "filled" in found[0]["output_tail"]
    assert json.loads(out)["run_id"] != run["id"], out  # the next turn was a turn of its own
    assert not list((small_fs.root / "registry.db.journal").glob("*.json"))


def test_self_repair_fix_on_a_full_disk_leaves_no_backup_and_the_registry_as_it_was(small_fs):
    url = str(small_fs.root / "registry.db")
    g = _goal(url)
    tamper.raw(url, "UPDATE goals SET title = 'edited behind its back' WHERE id = ?", (g,))
    before = snapshot(url)
    small_fs.fill(leave=96 * 1024)  # room to open the registry, not to copy it
    _one_disk_full_line(*loopx(url, "self-repair", "fix"))
    assert not list(small_fs.root.glob("registry.db.bak*"))
    small_fs.free()
    assert snapshot(url) == before
    code, out, err = loopx(url, "self-repair", "fix", "--json")
    assert code == 0 and json.loads(out)["backup"], (out, err)


@pytest.mark.slow
def test_concurrent_self_repair_fixes_get_backups_of_their_own(tmp_path):
    url = str(tmp_path / "registry.db")
    g = _goal(url)
    procs = []
    for _ in range(4):
        tamper.raw(url, "UPDATE goals SET title = 'edited behind its back' WHERE id = ?", (g,))
    from tests.reliability.conftest import env

    for _ in range(4):
        procs.append(subprocess.Popen([PY, "-m", "loopx", "self-repair", "fix", "--json"], env=env(url),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    backups = [json.loads(o)["backup"] for o, _ in outs if o.strip() and json.loads(o).get("backup")]
    assert backups and len(set(backups)) == len(backups), outs
    assert sorted(str(p) for p in tmp_path.glob("registry.db.bak-*")) == sorted(backups)
    for b in backups:
        assert snapshot(b)["goals"]  # each a whole copy


def test_two_backups_in_the_same_instant_get_different_names(tmp_path, monkeypatch):
    """The race made certain: each repair's first existence check waits for the other's (the
    answer unchanged), so both look before either writes; names must still differ."""
    import pathlib
    import threading

    from loopx.domain import backup as repairs  # the backup a repair takes first (loopx.api.RepairSession.backup)

    url = str(tmp_path / "registry.db")
    _goal(url)
    real_exists = pathlib.Path.exists
    both_looking, looked = threading.Barrier(2), set()

    def slow_exists(self, *a, **kw):
        me = threading.current_thread()
        if me.name.startswith("backup-") and me not in looked:
            looked.add(me)
            both_looking.wait(30)
        return real_exists(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "exists", slow_exists)
    regs = [Registry.open(url) for _ in range(2)]
    names = [None, None]

    def backup(i):
        names[i] = repairs.backup(regs[i])

    threads = [threading.Thread(target=backup, args=(i,), name=f"backup-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for r in regs:
        r.close()
    assert names[0] and names[1] and names[0] != names[1], names
    assert all(snapshot(n)["goals"] for n in names)

"""The confinement policy as a value (``loopx.sandbox.confine_policy.Policy``, ``loopx.sandbox.world.World``): what
its methods say a step may read, write and reach is what the kernel then enforces; its file
survives a round trip; and a policy or world file LoopX did not write (another version, a key more
or less, a value of the wrong type) starts nothing - the watcher refuses it for real, the step
fails closed instead of running unconfined or half-confined."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from loopx.turn import confine
from loopx.sandbox import landlock, process
from loopx.sandbox.confine_policy import Policy, PolicyError, Rule
from loopx.values.errors import LoopxError
from loopx.sandbox.world import Mount, World

pytestmark = pytest.mark.skipif(confine.backend() is None, reason="needs Landlock and bubblewrap")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A user's machine in miniature: LoopX's config dir with a key, a git checkout as the
    workdir, a SQLite registry in a directory of its own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LOOPX_UNCONFINED", raising=False)
    monkeypatch.delenv("LOOPX_CONFINE_BACKEND", raising=False)
    key = tmp_path / "config" / "loopx" / "integrity.key"
    key.parent.mkdir(parents=True)
    key.write_text("secret")
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "calc.py").write_text("x = 1\n")
    regdir = tmp_path / "registry"
    regdir.mkdir()
    (regdir / "registry.db").write_text("db")
    (regdir / "notes.txt").write_text("notes")
    return {"key": key, "work": work, "registry": regdir / "registry.db", "regdir": regdir, "root": tmp_path}


def _step(m, backend: str = "landlock", url: str | None = None) -> confine.Step:
    return confine.Step(registry_url=url or f"sqlite:///{m['registry']}", workdir=str(m["work"]), backend=backend)


def _run(step: confine.Step, script: str, cwd: str) -> dict:
    token = process.STEP.set(step)
    try:
        return process.run_command(["sh", "-c", script], env={}, timeout=60, cwd=cwd)
    finally:
        process.STEP.reset(token)


PROBE = r'''
for p in "$@"; do
  if [ -d "$p" ]; then t="$p/probe.$$"; how=ls; else t="$p"; how=cat; fi
  if "$how" "$p" >/dev/null 2>&1; then r=read; else r=noread; fi
  if ( : >> "$t" ) 2>/dev/null; then w=write; else w=nowrite; fi
  echo "PROBE $p $r $w"
done
'''


def test_what_the_policy_says_a_step_may_read_and_write_is_what_the_kernel_enforces(machine):
    m = machine
    step = _step(m)
    try:
        policy = Policy.load(step.policy_file)
        work, real = str(m["work"]), os.path.realpath
        paths = {
            "workdir file": real(work + "/calc.py"), "workdir": real(work), "git config": real(work + "/.git/config"),
            "git dir": real(work + "/.git"), "registry": real(str(m["registry"])),
            "registry dir": real(str(m["regdir"])), "registry notes": real(str(m["regdir"] / "notes.txt")),
            "key": real(str(m["key"])), "config dir": real(str(m["key"].parent)), "tmp": real(step.tmp),
            "system file": "/etc/passwd", "policy file": real(step.policy_file),
        }
        said = {name: ("read" if policy.may_read(p) else "noread", "write" if policy.may_write(p) else "nowrite")
                for name, p in paths.items()}
        # What the kernel says, one path at a time, under the step's policy (the watcher enforces it).
        token = process.STEP.set(step)
        try:
            res = process.run_command(["sh", "-c", PROBE, "probe", *paths.values()], env={}, timeout=60, cwd=work)
        finally:
            process.STEP.reset(token)
        assert res["exit_code"] == 0, res
        seen = {line.split()[1]: tuple(line.split()[2:]) for line in res["output_tail"].splitlines()
                if line.startswith("PROBE ")}
        done = {name: seen[p] for name, p in paths.items()}
        assert done == said, (done, said)
        # And what that is: the workdir's files, not git's metadata, never the registry or the key.
        assert said["workdir file"] == ("read", "write") and said["tmp"] == ("read", "write")
        assert said["git config"] == ("read", "nowrite") and said["registry notes"] == ("read", "nowrite")
        # The directory that holds a hidden path is passed through, never listed.
        assert said["registry dir"] == ("noread", "nowrite") and said["config dir"] == ("noread", "nowrite")
        assert said["registry"] == ("noread", "nowrite") and said["key"] == ("noread", "nowrite")
        assert said["policy file"] == ("read", "nowrite") and said["system file"] == ("read", "nowrite")
        assert policy.writable_root_of(real(work + "/calc.py")) == real(work)
        assert policy.writable_root_of("/etc/passwd") is None
        assert real(work) in policy.writable_roots() and policy.reads() and all(not r.writes for r in policy.reads())
        # Where no mount namespace can be had git's metadata is left out instead of mounted read-only.
        fallback = policy.unpinned()
        assert fallback.read_only == () and not fallback.may_write(paths["git config"])
        assert not fallback.may_read(paths["key"]) and fallback.may_write(paths["workdir file"])
    finally:
        step.close()


def test_a_postgresql_registrys_port_is_denied_and_no_other(machine):
    step = _step(machine, url="postgresql://loopx@127.0.0.1:6543/loopx")
    try:
        policy = Policy.load(step.policy_file)
        assert policy.denies_tcp(6543) and not policy.denies_tcp(443) and not policy.denies_tcp(5432)
    finally:
        step.close()
    step = _step(machine)
    try:
        assert Policy.load(step.policy_file).deny_tcp == ()
    finally:
        step.close()


def test_the_policy_and_the_world_survive_their_files_round_trip(machine):
    step = _step(machine, backend="bwrap")
    try:
        text = Path(step.policy_file).read_text()
        policy = Policy.from_json(text)
        assert json.loads(text)["version"] == Policy.VERSION == 1
        assert policy.world is True and Policy.from_json(policy.to_json()) == policy
        assert policy.to_json() == text  # what LoopX wrote is what it reads back, byte for byte
        assert step.world is not None
        world_file = os.path.join(step.dir, "policy.world.json")
        assert World.load(world_file) == step.world and json.loads(Path(world_file).read_text())["version"] == 1
        assert Mount("tmpfs", "", "/run") in step.world.mounts
        # The world shows the workdir; LoopX's own directory (not in it) sends a command to the workdir.
        work = os.path.realpath(str(machine["work"]))
        assert step.world.shows(work) and step.world.chdir_for(work) == work
        assert not step.world.shows(str(machine["root"] / "config")) and step.world.chdir_for("/tmp/x") == work
    finally:
        step.close()
    pinned = Policy(rules=(Rule("/usr", "r"), Rule("/srv/work", "rw")), deny_tcp=(5432,), read_only=("/srv/work/.git",),
                    rules_unpinned=(Rule("/usr", "r"), Rule("/srv/work/src", "rw")))
    assert Policy.from_json(pinned.to_json()) == pinned
    assert pinned.may_write("/srv/work/a.py") and not pinned.may_write("/srv/work/.git/config")
    assert not pinned.unpinned().may_write("/srv/work/a.py") and pinned.unpinned().may_write("/srv/work/src/a.py")
    assert pinned.writes_near("/srv") == "/srv/work" and pinned.writes_near("/srv/work/x") == "/srv/work"
    assert pinned.writes_near("/usr/lib") is None


GOOD = {"version": 1, "rules": [["/usr", "r"], ["/srv", "rw"]], "rules_unpinned": [], "pin": [], "read_only": [],
        "deny_tcp": [5432], "world": False}
#: Each a policy file LoopX did not write, and what the refusal names.
TAMPERED = {
    "another version": ({**GOOD, "version": 2}, "version 2"),
    "no version": ({k: v for k, v in GOOD.items() if k != "version"}, "version None"),
    "a version that is a string": ({**GOOD, "version": "1"}, "version '1'"),
    "an unknown key": ({**GOOD, "allow_all": True}, "unknown keys: 'allow_all'"),
    "a key missing": ({k: v for k, v in GOOD.items() if k != "deny_tcp"}, "lacks keys: 'deny_tcp'"),
    "a port as a string": ({**GOOD, "deny_tcp": "5432"}, "'deny_tcp' is not a list of TCP ports"),
    "a port out of range": ({**GOOD, "deny_tcp": [70000]}, "'deny_tcp' is not a list of TCP ports"),
    "a port that is a boolean": ({**GOOD, "deny_tcp": [True]}, "'deny_tcp' is not a list of TCP ports"),
    "an unknown access": ({**GOOD, "rules": [["/", "rwx"]]}, "'rules' holds ['/', 'rwx']"),
    "a relative path": ({**GOOD, "rules": [["etc", "r"]]}, "'rules' holds 'etc', not an absolute path"),
    "rules as an object": ({**GOOD, "rules": {"/": "rw"}}, "'rules' is not a list"),
    "world as a string": ({**GOOD, "world": "no"}, "'world' is not true or false"),
    "not an object": ([GOOD], "not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_policy_loopx_did_not_write_is_refused_with_what_is_wrong(case):
    doc, why = TAMPERED[case]
    with pytest.raises(PolicyError) as err:
        Policy.from_json(json.dumps(doc))
    assert why in str(err.value), str(err.value)
    with pytest.raises(PolicyError):
        landlock.parse(json.dumps(doc))
    assert Policy.from_json(json.dumps(GOOD)).denies_tcp(5432)
    with pytest.raises(PolicyError, match="not JSON"):
        Policy.from_json("{not json")


def test_a_tampered_policy_file_starts_nothing_the_step_fails_closed(machine):
    """The watcher reads the step's policy file before it starts anything: a file of another
    version, with a key more or less or a value of the wrong type, is refused (exit 126,
    ``confinement_unavailable``) - the command never runs, neither unconfined nor under a policy
    read half-way."""
    m = machine
    marker = m["work"] / "ran"
    for backend in ("landlock", "bwrap"):
        step = _step(m, backend=backend)
        try:
            original = Path(step.policy_file).read_text()
            res = _run(step, f"touch {marker}", str(m["work"]))
            assert res["exit_code"] == 0 and marker.exists(), res  # the file as LoopX wrote it runs
            marker.unlink()
            doc = json.loads(original)
            tampered = {"version 2": {**doc, "version": 2}, "unknown key": {**doc, "rules_v2": doc["rules"]},
                        "no version": {k: v for k, v in doc.items() if k != "version"},
                        # Read half-way, this string was once ports 5, 4, 3 and 2 denied and 5432 open.
                        "port as a string": {**doc, "deny_tcp": "5432"},
                        "everything writable": {**doc, "version": 2, "rules": [["/", "rw"]]}}
            for name, forged in tampered.items():
                Path(step.policy_file).write_text(json.dumps(forged))
                res = _run(step, f"touch {marker}", str(m["work"]))
                assert res["exit_code"] == 126, (backend, name, res)
                assert "[confinement_unavailable]" in res["output_tail"] and "policy file" in res["output_tail"], res
                assert not marker.exists(), (backend, name)
            Path(step.policy_file).write_text("")  # emptied
            assert _run(step, f"touch {marker}", str(m["work"]))["exit_code"] == 126 and not marker.exists()
            # A private run inside that step (Issue-Fix's tests) refuses too, before it starts anything.
            from loopx.turn import private_run

            token = process.STEP.set(step)
            try:
                with private_run.private_dir() as where, pytest.raises(LoopxError) as err:
                    private_run.run_confined(["touch", str(marker)], writable=[where], env={}, timeout=60)
            finally:
                process.STEP.reset(token)
            assert err.value.code == "confinement_unavailable" and "policy" in str(err.value)
            assert not marker.exists()
        finally:
            step.close()


def test_a_tampered_world_file_starts_nothing(machine):
    m = machine
    marker = m["work"] / "ran"
    step = _step(m, backend="bwrap")
    try:
        world_file = Path(step.dir) / "policy.world.json"
        doc = json.loads(world_file.read_text())
        # A world without its masks (the user's $HOME, /tmp shown), or of another version.
        for forged in ({**doc, "version": 2}, {**doc, "mounts": [["bind-all", "/", "/"]]},
                       {k: v for k, v in doc.items() if k != "masked"}, {**doc, "extra": 1}):
            world_file.write_text(json.dumps(forged))
            res = _run(step, f"touch {marker}", str(m["work"]))
            assert res["exit_code"] == 127 and "cannot build the step's world" in res["output_tail"], res
            assert not marker.exists()
        with pytest.raises(PolicyError, match="version 2"):
            World.from_json(json.dumps({**doc, "version": 2}))
    finally:
        step.close()


def test_the_watcher_does_not_import_attrs_or_typing(machine):
    """The watcher (``python -I -S``, no site-packages) reads and enforces the step's policy with
    the stdlib-only checks of loopx/sandbox/landlock.py: no attrs, no typing, nothing of LoopX imported on
    its path (docs/security.md, "The policy is one value")."""
    from loopx.sandbox import process_watcher

    step = _step(machine)
    try:
        command = process_watcher.contained(["true"], False, step.policy_file)
        assert command[1:3] == ["-I", "-S"], command
        r = subprocess.run([command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, timeout=60)
    finally:
        step.close()
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "json" in imported and "ctypes" in imported, imported  # it did read and enforce the policy
    assert not {m for m in imported if m.split(".")[0] in ("attrs", "attr", "typing", "loopx")}, imported

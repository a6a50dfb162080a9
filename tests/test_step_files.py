"""Files a step names are opened without check-then-use (loopx/sandbox/safe_open.py), tried as a hostile
agent would: inside a real confined turn (``loopx turn``, shell executor), a background thread
flips a symbolic link in a tight loop between a harmless file and a target outside the step's
reach - the registry's key file (for ``evidence add --file``), a fake ``site-packages/zz.pth``
(for a command that writes a path it was given) - while the agent calls those commands through
the broker again and again. The key is never hashed and ``zz.pth`` never written. Then the
single shots: a link as the final component, a link as an intermediate directory, ``..``, and a
hard link to a file outside.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.ledger.registry import Registry
from tests.test_confine_attacks import _prepare, world  # noqa: F401 - the fixture
from tests.test_turn_helpers import PY

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")

#: How many times each racing command runs in the turn.
ROUNDS = 25

# A plugin command writing a path it was given, as a plugin must: through loopx.api.files.write
# (what Issue-Fix's `handoff --output` uses).
WRITER_PLUGIN = '''
import click
from loopx import hookimpl


@hookimpl
def loopx_register_commands(cli):
    @click.command("scribble")
    @click.option("--out", type=click.Path(), required=True)
    def scribble(out):
        """Write a file where told (in LoopX's process, outside the step's confinement)."""
        from loopx import api

        print("SCRIBBLED", api.files.write(out, b"import os; os.system('loopx gate approve ...')\\n"))

    cli.add_command(scribble)
'''

# The hostile agent: a python script run as the contract's action, in its workdir, confined.
RACE = r'''
import json, os, subprocess, sys, threading
key, site, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
stop = threading.Event()

def regular(tmp):
    with open(tmp, "w") as f:
        f.write("harmless\n")

def flip_file(name, target):
    """`name` is a regular file, then a link to `target`, then a file again... (atomic renames)."""
    i = 0
    while not stop.is_set():
        tmp = ".%s.%d" % (name, i % 2)
        try:
            if i % 2:
                os.symlink(target, tmp)
            else:
                regular(tmp)
            os.replace(tmp, name)
        except OSError:
            pass
        i += 1

def flip_dir(name, target):
    """`name` is a real directory, then a link to the directory `target`, then real again..."""
    os.makedirs(name + ".real", exist_ok=True)
    while not stop.is_set():
        try:
            os.rename(name + ".real", name)
            os.rename(name, name + ".real")
            os.symlink(target, name)
            os.unlink(name)
        except OSError:
            pass

def loopx(*argv):
    p = subprocess.run(["loopx", "--format", "json", *argv], capture_output=True, text=True)
    return [p.returncode, (p.stdout + p.stderr).strip()[-400:]]

def race(flipper, name, target, argv):
    stop.clear()
    t = threading.Thread(target=flipper, args=(name, target))
    t.start()
    try:
        return [loopx(*argv) for _ in range(rounds)]
    finally:
        stop.set()
        t.join()

out = {}
out["evidence_final"] = race(flip_file, "f", key, ["evidence", "add", "--kind", "file", "--summary", "race",
                                                   "--file", "f"])
out["evidence_dir"] = race(flip_dir, "kd", os.path.dirname(key),
                           ["evidence", "add", "--kind", "file", "--summary", "race", "--file",
                            "kd/" + os.path.basename(key)])
out["write_final"] = race(flip_file, "zz.pth", os.path.join(site, "zz.pth"), ["scribble", "--out", "zz.pth"])
out["write_dir"] = race(flip_dir, "sp", site, ["scribble", "--out", "sp/zz.pth"])

# Single shots.
os.symlink(key, "keylink")
os.symlink(os.path.dirname(key), "keydir")
os.symlink(os.path.join(site, "zz.pth"), "pth-link")
os.symlink(site, "site-link")
os.makedirs("sub", exist_ok=True)
with open("plain.txt", "w") as f:
    f.write("plain\n")
out["read_link_final"] = loopx("evidence", "add", "--kind", "file", "--summary", "s", "--file", "keylink")
out["read_link_dir"] = loopx("evidence", "add", "--kind", "file", "--summary", "s", "--file",
                             "keydir/" + os.path.basename(key))
# `..` out of the step's directory (its workspace) to the real files outside it.
out["read_dotdot"] = loopx("evidence", "add", "--kind", "file", "--summary", "s", "--file",
                           "sub/../" + os.path.relpath(os.path.join(os.path.dirname(site), "outside-secret.txt")))
out["read_hardlink"] = loopx("evidence", "add", "--kind", "file", "--summary", "s", "--file", "hardlink.txt")
out["write_link_final"] = loopx("scribble", "--out", "pth-link")
out["write_link_dir"] = loopx("scribble", "--out", "site-link/zz.pth")
out["write_dotdot"] = loopx("scribble", "--out", "sub/../" + os.path.relpath(os.path.join(site, "zz.pth")))
out["read_missing_dir"] = loopx("evidence", "add", "--kind", "file", "--summary", "s", "--file", "nope/x.txt")
out["legit_read"] = loopx("evidence", "add", "--kind", "file", "--summary", "plain", "--file", "plain.txt")
out["legit_write"] = loopx("scribble", "--out", "sub/written.txt")
with open("race-result.json", "w") as f:
    json.dump(out, f)
print("RACE done")
'''


@pytest.mark.slow
def test_links_swapped_in_while_the_broker_serves_a_path_never_reach_outside_the_step(world):
    """The measured attacks: ``evidence add --file`` hashing the key, and a written path landing in
    ``site-packages/zz.pth``, raced by a link flipped in a tight loop (final component, and an
    intermediate directory), through the broker of a real confined turn, ``ROUNDS`` times each."""
    from tests.plugin_site import plugin_env

    tmp = world["tmp"]
    site = tmp / "site-packages"
    site.mkdir()
    (site / "zz.pth").write_text("original\n")
    (tmp / "outside-secret.txt").write_text("not the agent's\n")
    site_env = plugin_env(tmp, world["url"], scribble="loopx_scribble_safe_test")
    (tmp / "site" / "loopx_scribble_safe_test.py").write_text(WRITER_PLUGIN)
    made, _ = _prepare(world, acts={"work": [PY, "race.py", str(world["keydir"] / "registry.key"), str(site),
                                             str(ROUNDS)]})
    work = world["work"]
    (work / "race.py").write_text(RACE)
    # The step runs in the goal's workspace (loopx/domain/workspace.py), made here as its first turn would
    # (from the checkout, race.py with it), so the hard link below is in the step's own directory.
    from loopx.domain import workspace

    with Registry.open(world["url"]) as reg:
        ws = Path(workspace.ensure(reg, "user", made["goal"], default_project=str(work))["workdir"])
    assert (ws / "race.py").read_text() == RACE
    # A hard link to a file outside the workdir, made before the turn (under Landlock the agent
    # could not make one itself: linking across to a directory it may not write is refused).
    os.link(tmp / "outside-secret.txt", ws / "hardlink.txt")
    key = (world["keydir"] / "registry.key").read_bytes()
    env = {**site_env, "HOME": world["env"]["HOME"], "XDG_CONFIG_HOME": world["env"]["XDG_CONFIG_HOME"],
           "PATH": world["env"]["PATH"]}
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"]], env=env,
                       cwd=work, capture_output=True, text=True, timeout=900)
    t = json.loads(p.stdout)
    with Registry.open(world["url"]) as reg, reg.read() as tx:
        tail = "".join(json.loads(e["data"])["output_tail"] for e in
                       tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'command'", (t["run_id"],)))
        recorded = tx.query("SELECT summary, file_path, file_sha256 FROM evidence WHERE run_id = ? AND kind = 'file'",
                            (t["run_id"],))
    assert "RACE done" in tail, (tail[-3000:], p.stderr[-2000:])
    out = json.loads((ws / "race-result.json").read_text())

    # Never hashed: no evidence carries the key's (or the outside file's) digest.
    forbidden = {"sha256:" + hashlib.sha256(key).hexdigest(),
                 "sha256:" + hashlib.sha256(b"not the agent's\n").hexdigest()}
    assert not [r for r in recorded if r["file_sha256"] in forbidden], recorded
    harmless = "sha256:" + hashlib.sha256(b"harmless\n").hexdigest()
    raced = [r for r in recorded if r["summary"] == "race"]
    # The races were live: some rounds went through (the harmless file), the rest were refused.
    assert raced and all(r["file_sha256"] == harmless for r in raced), raced
    for name in ("evidence_final", "evidence_dir", "write_final", "write_dir"):
        for code, text in out[name]:
            assert code == 0 or "actor_forbidden" in text or "invalid_argument" in text, (name, text)
    # Never written: the fake site-packages is as it was, nothing added to it.
    assert (site / "zz.pth").read_text() == "original\n"
    assert sorted(os.listdir(site)) == ["zz.pth"]
    assert any(code == 0 for code, _ in out["write_final"] + out["write_dir"]), out
    for name in ("read_link_final", "read_link_dir", "read_dotdot", "read_hardlink", "write_link_dir",
                 "write_dotdot"):
        code, text = out[name]
        assert code == 2 and "actor_forbidden" in text, (name, text)
    assert "symbolic link" in out["read_link_final"][1] and "symbolic link" in out["write_link_dir"][1], out
    assert "hard links" in out["read_hardlink"][1], out["read_hardlink"]
    # A directory that does not exist is the command's plain error, not a refusal.
    assert out["read_missing_dir"][0] == 2 and "invalid_argument" in out["read_missing_dir"][1], out
    assert "does not exist" in out["read_missing_dir"][1]
    assert out["legit_read"][0] == 0 and out["legit_write"][0] == 0, out
    assert (ws / "sub" / "written.txt").read_bytes().startswith(b"import os")
    # A link named as the output is replaced by the file, never written through.
    assert out["write_link_final"][0] == 0 and not (ws / "pth-link").is_symlink(), out["write_link_final"]
    assert (tmp / "outside-secret.txt").read_text() == "not the agent's\n"
    assert (world["keydir"] / "registry.key").read_bytes() == key


def test_a_path_opened_beneath_a_root_follows_no_link_and_leaves_no_root(tmp_path):
    """The core of it, without a turn: both ways of resolving (``openat2`` where the kernel has it,
    the ``O_NOFOLLOW`` walk from a held directory otherwise) refuse the same paths."""
    from loopx.sandbox import safe_open
    from loopx.values.errors import LoopxError

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("S")
    (root / "a" / "f").write_text("fine")
    (root / "a" / "link").symlink_to(outside / "secret")
    (root / "dirlink").symlink_to(outside)
    walk = [True, False] if safe_open.openat2_available() else [False]
    saved = list(safe_open._openat2_state)
    try:
        for use_openat2 in walk:
            if not use_openat2:
                safe_open._openat2_state[:] = [None]
            assert safe_open.read_beneath(str(root), "a/f") == b"fine"
            for rel in ("a/link", "dirlink/secret", "../outside/secret", "a/../../outside/secret"):
                with pytest.raises(OSError):
                    safe_open.read_beneath(str(root), rel)
            for given in ("a/link", "dirlink/secret", "../outside/secret", str(outside / "secret")):
                with pytest.raises(LoopxError) as err:
                    p = safe_open.place(given, roots=[str(root)], cwd=str(root))
                    try:
                        os.close(p.open_read())
                    finally:
                        p.close()
                assert err.value.code == "actor_forbidden", given
            # Writing over a link replaces the link; its target is untouched.
            p = safe_open.place("a/link", roots=[str(root)], cwd=str(root))
            p.write_bytes(b"new")
            p.close()
            assert (outside / "secret").read_text() == "S" and not (root / "a" / "link").is_symlink()
            (root / "a" / "link").unlink()
            (root / "a" / "link").symlink_to(outside / "secret")
    finally:
        safe_open._openat2_state[:] = saved


def test_a_command_served_in_a_broker_child_resolves_beneath_the_steps_roots_again(tmp_path, sqlite_url):
    """A request the broker serves in a ``loopx`` child (while another runs in its process) gets the
    step in ``LOOPX_STEP``, the roots with it: the child opens the path the same way."""
    from loopx.ledger.registry import Registry
    from tests.test_turn_helpers import make_goal

    with Registry.open(sqlite_url) as reg:
        goal = make_goal(reg)["goal"]
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("secret\n")
    (work / "plain.txt").write_text("plain\n")
    (work / "link").symlink_to(outside)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=sqlite_url, LOOPX_STEP=json.dumps({"policy": None, "env": {}, "roots": [str(work)]}))

    def add(path, **extra):
        return subprocess.run([PY, "-m", "loopx", "--format", "json", "evidence", "add", "--goal-id", goal, "--kind",
                               "file", "--summary", "s", "--file", path], env={**env, **extra}, cwd=work,
                              capture_output=True, text=True, timeout=60)

    p = add("plain.txt")
    assert p.returncode == 0 and json.loads(p.stdout)["file_sha256"] == \
        "sha256:" + hashlib.sha256(b"plain\n").hexdigest(), p
    for path in ("link", str(outside), "../outside.txt"):
        p = add(path)
        assert p.returncode == 2 and json.loads(p.stdout)["error"]["code"] == "actor_forbidden", (path, p.stdout)
    # A step whose roots are not known names nothing (fails closed).
    p = add("plain.txt", LOOPX_STEP=json.dumps({"policy": None, "env": {}}))
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["code"] == "actor_forbidden", p.stdout

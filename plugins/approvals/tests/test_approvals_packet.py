"""The approvals page names the review packet Issue-Fix records in its capability state (path and
sha256), read through ``loopx.api`` - the Issue-Fix plugin is not imported - and, on a goal
without one, says nothing of a packet. Values from the registry are escaped."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import textwrap
from urllib.parse import urlsplit
from approvals_helpers import cli


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=str(tmp_path / "registry.db"), LOOPX_PLUGINS="approvals,issue_fix",
               HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    return env


def _page(env) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "approvals", "serve", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        login = urlsplit(json.loads(proc.stdout.readline())["login"])
        conn = http.client.HTTPConnection("127.0.0.1", login.port, timeout=30)
        host = {"Host": f"127.0.0.1:{login.port}"}
        conn.request("GET", f"{login.path}?{login.query}", headers=host)
        resp = conn.getresponse()
        resp.read()
        conn.request("GET", "/", headers={**host, "Cookie": resp.getheader("Set-Cookie").split(";")[0]})
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_packet_issue_fix_records_is_on_the_page(tmp_path):
    env = _env(tmp_path)
    goal = cli(env, "project-prompt", "create", "--title", "Fix the parser", "--description", "d")["id"]
    cli(env, "action", "add", goal, "--name", "publish", "--", sys.executable, "-c", "pass")
    gate = cli(env, "gate", "add", goal, "--title", "Publish <b>verified</b> commit", "--scope", "production",
                "--blocks", "action:publish")["id"]
    bare = cli(env, "project-prompt", "create", "--title", "No packet here", "--description", "d")["id"]
    cli(env, "gate", "add", bare, "--title", "Go ahead?")
    sha = "ab" * 32
    script = textwrap.dedent(f"""
        from loopx import api
        with api.Registry.open(api.cli.registry_url()) as reg:
            api.state.set(reg, "issue_fix", {goal!r}, {{"handoff": {{"packet": "/data/goal/handoff.md",
                          "sha256": {sha!r}, "run_id": "r-1"}}}})
    """)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    page = _page(env)
    card = page[page.index(f"data-gate-id='{gate}'"):]
    card = card[:card.index("</section>")]
    assert "<code class='packet-path'>/data/goal/handoff.md</code>" in card
    assert f"<code class='packet-sha256'>{sha}</code>" in card
    assert "Publish &lt;b&gt;verified&lt;/b&gt; commit" in card and "<b>verified" not in page
    bare_article = page[page.index(f"data-goal-id='{bare}'"):]
    bare_article = bare_article[:bare_article.index("</article>")]
    assert "Go ahead?" in bare_article and "class='packet" not in bare_article

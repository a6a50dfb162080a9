"""Whether an agent CLI can take a turn here: installed (its version), and logged in - asked of
the CLI itself without a model call (``claude auth status``, ``codex login status``).

``loopx doctor`` shows it; the ``claude-code`` and ``codex`` executors ask it before a turn's
should-run charges anything, so a CLI that is missing or logged out costs no budget
(docs/agents.md, "Before a turn"). The answer is for the environment the agent would run in
(``HOME``, ``CODEX_HOME``, the API-key variables): what the CLI would see.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

#: executor name -> (the variable naming its program, default program, how to log in)
HOSTS = {
    "claude-code": ("LOOPX_CLAUDE_BIN", "claude", "claude auth login (or set ANTHROPIC_API_KEY)"),
    "codex": ("LOOPX_CODEX_BIN", "codex", "codex login"),
}
TIMEOUT = 30.0


def program(host: str) -> str:
    """The program the executor ``host`` runs (its ``LOOPX_*_BIN``, else the CLI's name)."""
    variable, default, _ = HOSTS[host]
    return os.environ.get(variable) or default


def _ask(argv: list[str], env: dict | None = None) -> tuple[int | None, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                           env=env, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def probe(host: str, *, version: bool = True) -> dict:
    """``{"host", "program", "path", "installed", "version", "logged_in", "how", "fix"}`` of the
    agent CLI the executor ``host`` runs. ``logged_in`` is ``None`` when the CLI cannot say."""
    variable, _default, login = HOSTS[host]
    name = program(host)
    path = shutil.which(name)
    out = {"host": host, "program": name, "path": path, "installed": path is not None, "version": None,
           "logged_in": None, "how": "", "fix": None}
    if path is None:
        out["how"] = f"{name!r} is not installed or not on PATH"
        out["fix"] = f"install it, or point {variable} at it (docs/agents.md)"
        return out
    if version:
        code, text = _ask([path, "--version"])
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("WARNING")]
        out["version"] = lines[-1][:120] if code == 0 and lines else None
    logged, how = (_claude if host == "claude-code" else _codex)(path)
    out["logged_in"], out["how"] = logged, how
    if logged is False:
        out["fix"] = login
    return out


def _claude(path: str) -> tuple[bool | None, str]:
    # Without this it says hello to the API (HEAD /api/hello): the check talks to nothing.
    quiet = {**os.environ, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    code, text = _ask([path, "auth", "status", "--json"], env=quiet)
    start = text.find("{")
    try:
        doc = json.loads(text[start:text.rfind("}") + 1]) if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "loggedIn" not in doc:
        return None, f"`claude auth status` gave no answer (exit {code})"
    if doc["loggedIn"]:
        source = doc.get("apiKeySource") or doc.get("authMethod") or "yes"
        return True, f"logged in ({source})"
    return False, "not logged in (`claude auth status`)"


def _codex(path: str) -> tuple[bool | None, str]:
    if os.environ.get("LOOPX_CODEX_BASE_URL"):
        # A provider of the user's own (docs/agents.md): its key comes from a variable, no login.
        key = os.environ.get("LOOPX_CODEX_ENV_KEY") or "OPENAI_API_KEY"
        if os.environ.get(key):
            return True, f"the provider at LOOPX_CODEX_BASE_URL, key in {key}"
        return False, f"LOOPX_CODEX_BASE_URL is set but {key} is empty"
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    os.makedirs(home, exist_ok=True)  # as the executor does: Codex refuses to start without it
    code, text = _ask([path, "login", "status"], env={**os.environ, "CODEX_HOME": home})
    said = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
    if code == 0:
        return True, said[:200] or "logged in"
    if "not logged in" in said.lower():
        return False, "not logged in (`codex login status`)"
    return None, f"`codex login status` gave no answer (exit {code}): {said[:200]}"

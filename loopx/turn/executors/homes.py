"""Each goal's own config directories for the agent CLIs, seeded from the user's login each turn.

Claude Code and Codex keep their state - sessions, shell snapshots, rules, settings, hooks, MCP
servers, ``AGENTS.override.md`` - in one directory, which the user's own sessions read too. A
governed turn never gets the user's: the executors start the CLI with ``CLAUDE_CONFIG_DIR`` /
``CODEX_HOME`` pointing at the goal's own directory (mode 0700)::

    <user data dir>/loopx/agent-homes/<registry key>/<goal id>/{claude,codex}

which the turn may write, while the user's ``~/.claude``, ``~/.claude.json`` and ``~/.codex``
(``$CODEX_HOME``) are read-only to it (:mod:`loopx.turn.confine`). Before each turn (before should-run,
so a failure charges nothing) :func:`seed` makes the directory again from the user's login:

* everything in it except the CLI's own history (:data:`KEEP`) is removed, so what the agent
  planted last turn (rules, hooks, snapshots, AGENTS files, skills...) is gone;
* the credentials are copied (``.credentials.json``; ``auth.json``) - read from the user's
  directory, never written back - when the user's copy changed since the last seeding (a token
  the CLI refreshed in the goal's copy is kept otherwise);
* only the settings on the allowlists below are carried over (the model, the provider, the
  account): never hooks, MCP servers, instructions, notify, status-line or helper commands.

docs/agents.md ("Each goal's own CLI state") lists the same and how to reset a goal's directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat

from loopx.values.errors import LoopxError

#: what survives from one turn to the next in a goal's directory (besides the seeded files)
KEEP = {"claude": {"projects", "todos", "history.jsonl", ".credentials.json"},
        "codex": {"sessions", "archived_sessions", "history.jsonl", "log", "auth.json"}}
#: the files :func:`seed` writes again every turn
SEEDED = {"claude": {".claude.json", "settings.json"}, "codex": {"config.toml"}}
#: ``settings.json`` keys carried over from the user's Claude Code settings
CLAUDE_SETTINGS = ("model", "env", "alwaysThinkingEnabled", "includeCoAuthoredBy", "forceLoginMethod",
                   "forceLoginOrgUUID", "cleanupPeriodDays")
#: ``.claude.json`` keys carried over: the account and the onboarding the CLI would otherwise ask for
CLAUDE_ACCOUNT = ("oauthAccount", "primaryApiKey", "userID", "hasCompletedOnboarding", "lastOnboardingVersion",
                  "customApiKeyResponses")
#: ``config.toml`` keys carried over from the user's Codex config (also inside each ``profiles.<name>``)
CODEX_SETTINGS = ("model", "model_provider", "model_reasoning_effort", "model_reasoning_summary", "model_verbosity",
                  "model_context_window", "model_auto_compact_token_limit", "preferred_auth_method",
                  "forced_login_method", "forced_chatgpt_workspace_id", "cli_auth_credentials_store",
                  "chatgpt_base_url", "openai_base_url", "profile")
#: keys of a ``model_providers.<name>`` table carried over (no ``auth`` command)
CODEX_PROVIDER = ("name", "base_url", "env_key", "env_key_instructions", "wire_api", "query_params", "http_headers",
                  "env_http_headers", "request_max_retries", "stream_max_retries", "stream_idle_timeout_ms",
                  "requires_openai_auth")
#: environment variables that carry a login on their own (no file needed)
_ENV_LOGIN = {"claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                         "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY"),
              "codex": ("LOOPX_CODEX_BASE_URL", "OPENAI_API_KEY", "CODEX_API_KEY")}
_LABEL = {"claude": "Claude Code", "codex": "Codex"}
_HOST = {"claude-code": "claude", "codex": "codex"}


def root() -> str:
    """Where every goal's agent directories live: ``<user data dir>/loopx/agent-homes``."""
    from loopx.values.userdirs import data_dir

    return os.path.join(data_dir(), "agent-homes")


def goal_dir(registry, goal_id: str, *, known: bool = False) -> str:
    """The directory holding ``goal_id``'s ``claude`` and ``codex`` directories; ``known``: the
    goal must exist (``not_found`` otherwise: no directory is made for a mistyped id)."""
    from loopx.ledger import artifacts
    from loopx.domain import goals

    if not artifacts.NAME.match(goal_id):
        raise LoopxError("invalid_argument", f"not a goal id: {goal_id!r}")
    with registry.read() as tx:
        if known:
            goals.load_goal(tx, goal_id)
        key = artifacts.registry_key(tx)
    return os.path.join(root(), key, goal_id)


def homes(registry, goal_id: str) -> list[str]:
    """The goal's agent directories that exist (what a turn of the goal may write)."""
    base = goal_dir(registry, goal_id)
    return [os.path.join(base, name) for name in ("claude", "codex") if os.path.isdir(os.path.join(base, name))]


def user_claude_dir() -> str:
    """The user's own Claude Code directory (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``)."""
    return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def user_claude_json() -> str:
    """The user's Claude Code global config (``.claude.json``: the account, MCP servers, projects)."""
    if os.environ.get("CLAUDE_CONFIG_DIR"):
        return os.path.join(os.environ["CLAUDE_CONFIG_DIR"], ".claude.json")
    legacy = os.path.join(user_claude_dir(), ".config.json")
    return legacy if os.path.isfile(legacy) else os.path.join(os.path.expanduser("~"), ".claude.json")


def user_codex_home() -> str:
    """The user's own Codex directory (``$CODEX_HOME``, else ``~/.codex``)."""
    return os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")


def home(registry, goal_id: str, host: str) -> str:
    """The goal's directory for ``host``, seeded now unless a turn's start already did."""
    path = os.path.join(goal_dir(registry, goal_id), _HOST[host])
    return path if os.path.isdir(path) else seed(registry, goal_id, host)


def remove(registry, goal_id: str) -> None:
    """Remove the goal's agent-CLI directories (when it is closed); nothing if it has none."""
    base = goal_dir(registry, goal_id)
    if os.path.isdir(base) and not os.path.islink(base):
        shutil.rmtree(base, ignore_errors=True)


def seed(registry, goal_id: str, host: str) -> str:
    """Make the goal's directory for ``host`` (``claude-code`` or ``codex``) from the user's login;
    its path. ``agent_logged_out`` ("needs you: log in to ...") when the login cannot be carried."""
    kind = _HOST[host]
    base = goal_dir(registry, goal_id, known=True)
    home = os.path.join(base, kind)
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        os.makedirs(home, mode=0o700, exist_ok=True)
        os.chmod(home, 0o700)
        _prune(home, KEEP[kind], SEEDED[kind])
        if kind == "claude":
            _seed_claude(base, home)
        else:
            _seed_codex(base, home)
    except OSError as exc:
        raise _needs_login(kind, f"cannot prepare the goal's own {_LABEL[kind]} directory {home} "
                                 f"({exc.strerror or exc})") from None
    return home


def _needs_login(kind: str, why: str) -> LoopxError:
    from loopx.views import agent_login

    host = "claude-code" if kind == "claude" else "codex"
    return LoopxError("agent_logged_out", f"needs you: log in to {_LABEL[kind]}: {agent_login.HOSTS[host][2]} ({why}); "
                                          "no run was opened and nothing was charged")


def _prune(home: str, keep: set, seeded: set) -> None:
    """Remove everything in ``home`` but ``keep`` and the regular files named ``seeded`` (written
    again next); links are removed, never followed."""
    for name in os.listdir(home):
        path = os.path.join(home, name)
        # (a kept file that is now a directory would stop the login's copy: removed)
        if name in keep and not os.path.islink(path) and not (name.endswith((".json", ".jsonl"))
                                                               and os.path.isdir(path)):
            continue
        if name in seeded and os.path.isfile(path) and not os.path.islink(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _read_user(kind: str, path: str) -> bytes | None:
    """The bytes of the user's file ``path`` (``None`` if there is none); a file that is there but
    cannot be read is a login LoopX cannot carry."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as f:
            return f.read(4 * 1024 * 1024)
    except OSError as exc:
        raise _needs_login(kind, f"cannot read {path}: {exc.strerror}") from None


def _write(directory: str, name: str, data: bytes, *, durable: bool = False) -> None:
    """Replace ``directory/name`` with ``data`` (mode 0600) by a rename, following no link.

    Only a changed login is written ``durable`` (fsync): the settings are written again next turn."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:  # unchanged since the last turn (the usual case): nothing to write
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as f:
                if stat.S_ISREG(os.fstat(f.fileno()).st_mode) and f.read(len(data) + 1) == data:
                    return
        except OSError:
            pass
        tmp = f".{name}.loopx-seed"
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _copy_credentials(kind: str, base: str, home: str, source: str, name: str) -> bool:
    """Copy the user's credentials file ``source`` to ``home/name`` when it changed since the last
    seeding (or the goal's copy is gone); whether the user has one."""
    data = _read_user(kind, source)
    record = os.path.join(base, f"{kind}.seeded")
    if data is None:  # logged out since: the goal's copy goes too
        for path in (os.path.join(home, name), record):
            if os.path.lexists(path):
                os.unlink(path)
        return False
    digest = hashlib.sha256(data).hexdigest()
    # The record lives beside the goal's directories, where no step can write.
    try:
        with open(record, encoding="utf-8") as f:
            seeded = f.read().strip()
    except OSError:
        seeded = ""
    if seeded != digest or not os.path.isfile(os.path.join(home, name)):
        _write(home, name, data, durable=True)
        _write(base, f"{kind}.seeded", digest.encode(), durable=True)
    return True


def _json_file(kind: str, path: str) -> dict:
    data = _read_user(kind, path)
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _seed_claude(base: str, home: str) -> None:
    user = user_claude_dir()
    has_file = _copy_credentials("claude", base, home, os.path.join(user, ".credentials.json"), ".credentials.json")
    account = {k: v for k, v in _json_file("claude", user_claude_json()).items() if k in CLAUDE_ACCOUNT}
    settings = {k: v for k, v in _json_file("claude", os.path.join(user, "settings.json")).items()
                if k in CLAUDE_SETTINGS}
    _write(home, ".claude.json", (json.dumps(account, indent=2) + "\n").encode())
    _write(home, "settings.json", (json.dumps(settings, indent=2) + "\n").encode())
    if not (has_file or "oauthAccount" in account or "primaryApiKey" in account
            or any(os.environ.get(v) for v in _ENV_LOGIN["claude"])):
        raise _needs_login("claude", f"no login LoopX can carry: no {os.path.join(user, '.credentials.json')}, "
                                    "no account in .claude.json, no API key in the environment")


def _seed_codex(base: str, home: str) -> None:
    user = user_codex_home()
    has_file = _copy_credentials("codex", base, home, os.path.join(user, "auth.json"), "auth.json")
    config = os.path.join(user, "config.toml")
    text = _read_user("codex", config)
    doc = {}
    if text:
        import tomllib

        try:
            doc = tomllib.loads(text.decode("utf-8", "replace"))
        except ValueError:
            raise _needs_login("codex", f"{config} is not valid TOML") from None
    _write(home, "config.toml", codex_config(doc).encode())
    if not (has_file or any(os.environ.get(v) for v in _ENV_LOGIN["codex"])):
        raise _needs_login("codex", f"no login LoopX can carry: no {os.path.join(user, 'auth.json')} (a login kept "
                                   "in the keyring cannot be carried: set cli_auth_credentials_store = \"file\" "
                                   "and log in again), no API key in the environment")


def codex_config(doc: dict) -> str:
    """The ``config.toml`` of a goal's Codex directory: the allowlisted part of the user's ``doc``."""
    def pick(table: dict) -> dict:
        return {k: v for k, v in table.items() if k in CODEX_SETTINGS}

    out = pick(doc)
    providers = doc.get("model_providers")
    if isinstance(providers, dict):
        out["model_providers"] = {n: {k: v for k, v in p.items() if k in CODEX_PROVIDER}
                                  for n, p in providers.items() if isinstance(p, dict)}
    profiles = doc.get("profiles")
    if isinstance(profiles, dict):
        out["profiles"] = {n: pick(p) for n, p in profiles.items() if isinstance(p, dict)}
    lines = ["# Made by LoopX from the allowlisted settings of your Codex config (docs/agents.md); "
             "rewritten every turn."]
    lines += [f"{_toml_key(k)} = {_toml(v)}" for k, v in out.items()]
    return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    key = str(key)
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else json.dumps(key)


def _toml(value) -> str:
    """``value`` as a TOML value (tables inline); a JSON string is a valid TOML basic string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))

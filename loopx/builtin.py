"""LoopX's own parts, registered through the same plugin manager as third-party plugins.

Every implementation here is ``trylast`` so that a plugin can override a default.
"""

from loopx import hookimpl


@hookimpl(trylast=True)
def loopx_register_stores(register):
    from loopx.store.sqlite import open_sqlite

    register("sqlite", open_sqlite)
    register("postgresql", open_postgres)
    register("postgres", open_postgres)


def open_postgres(url, readonly=False):
    """The PostgreSQL store; psycopg is imported only when a ``postgresql://`` URL is used."""
    try:
        from loopx.store.postgres import open_postgres as factory
    except ImportError as exc:
        from loopx.values.errors import LoopxError

        raise LoopxError(
            "registry_unavailable",
            f"PostgreSQL registries need psycopg: pip install 'psycopg[binary]>=3.2' ({exc})",
        ) from None
    return factory(url, readonly)


@hookimpl(trylast=True)
def loopx_register_executors(register):
    from loopx.turn.executors.shell import NAME, ShellExecutor

    register(NAME, ShellExecutor())
    # The agent executors import nothing until a turn runs; registering them costs three classes.
    from loopx.turn.executors.claude_code import ClaudeCodeExecutor
    from loopx.turn.executors.codex import CodexExecutor
    from loopx.turn.executors.command import CommandExecutor

    register("claude-code", ClaudeCodeExecutor())
    register("codex", CodexExecutor())
    register("command", CommandExecutor())

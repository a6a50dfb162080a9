"""What every command shares: output format, registry, actor, and error rendering.

Every LoopX command is a :class:`LoopxCommand`, which adds ``--format text|json`` and
``--json`` to it, so the format can be given before *and* after the subcommand, and turns a
:class:`~loopx.values.errors.LoopxError` into one line on stderr (text) or an ``{"error": ...}``
document on stdout (JSON), with exit status 2.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from loopx.values.errors import LoopxError

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn, TypeVar

    from loopx.ledger.registry import Registry

    _F = TypeVar("_F", bound=Callable[..., Any])  # a click command function, returned as it came

FORMAT_KEY = "loopx.format"
from loopx.cli.ids import REGISTRY_KEY  # noqa: E402,F401  (re-exported)


def _set_format(ctx, param, value):
    if param.name == "json_flag":
        if value:
            ctx.meta[FORMAT_KEY] = "json"
    elif value is not None:
        ctx.meta[FORMAT_KEY] = value


def format_options():
    """The ``--format`` and ``--json`` options, shared by the root group and every command."""
    return [
        click.Option(["--format", "output_format"], type=click.Choice(["text", "json", "jsonl"]), default=None,
                     expose_value=False, callback=_set_format,
                     help="Output format (default: text); jsonl: JSON Lines, one item a line (streamed by"
                          " history and evidence list)."),
        click.Option(["--json", "json_flag"], is_flag=True, expose_value=False, callback=_set_format,
                     help="Same as --format json."),
    ]


def wants_json(ctx: click.Context | None = None) -> bool:
    """Whether the current command prints JSON (``json`` or ``jsonl``)."""
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx) and ctx.meta.get(FORMAT_KEY) in ("json", "jsonl")


def wants_lines(ctx: click.Context | None = None) -> bool:
    """Whether the current command prints JSON Lines (``--format jsonl``)."""
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx) and ctx.meta.get(FORMAT_KEY) == "jsonl"


def _show_help(ctx, param, value):
    if value and not ctx.resilient_parsing:
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


class _PlainHelp:
    """A ``--help`` option built without click's translated help text.

    click looks its default help text up through gettext on every start-up, which imports
    ``locale`` and searches the disk for message catalogues: measurable on a command that runs
    before every agent turn.
    """

    def get_help_option(self, ctx):
        names = self.get_help_option_names(ctx)
        if not names or not self.add_help_option:
            return None
        if self._help_option is None:
            self._help_option = click.Option(names, is_flag=True, is_eager=True, expose_value=False,
                                             callback=_show_help, help="Show this message and exit.")
        return self._help_option


class _Examples:
    """``--help`` ends with an example, from :mod:`loopx.cli.examples` unless the command has an epilog."""

    def format_epilog(self, ctx, formatter):
        epilog = (self.epilog or "").strip()
        if epilog and not epilog.startswith("Example"):
            return super().format_epilog(ctx, formatter)
        if epilog:
            # A plugin's own `epilog="Example:\n  loopx ..."`: one command per line, never re-wrapped.
            lines = [ln.strip() for ln in epilog.splitlines()[1:] if ln.strip()]
        else:
            from loopx.cli.examples import example_for

            lines = example_for(ctx.command_path)
        if lines:
            formatter.write_paragraph()
            formatter.write_text("Example" + ("s:" if len(lines) > 1 else ":"))
            with formatter.indentation():
                for line in lines:
                    formatter.write(f"{' ' * formatter.current_indent}{line}\n")


class LoopxCommand(_Examples, _PlainHelp, click.Command):
    """A click command with LoopX's format options and error rendering."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.params.extend(format_options())

    def parse_args(self, ctx, args):
        rest = super().parse_args(ctx, args)
        if "goal_id" in ctx.params and not ctx.resilient_parsing:
            from loopx.cli.ids import merge_goal_argument

            merge_goal_argument(self, ctx)
        return rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except LoopxError as err:
            fail(err, ctx)


class LoopxGroup(_Examples, _PlainHelp, click.Group):
    """A click group whose subcommands are LoopX commands by default."""

    command_class = LoopxCommand

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.params.extend(format_options())

    def resolve_command(self, ctx, args):
        """As click's, but an unknown name gets "Did you mean ...?" (closest names by difflib)."""
        name = args[0] if args else ""
        if (name and not name.startswith("-") and not ctx.resilient_parsing
                and self.get_command(ctx, name) is None):
            import difflib

            names = self.list_commands(ctx) + list(getattr(self, "aliases", {}))
            close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            where = f"loopx {ctx.command_path.split(' ', 1)[1]} --help" if " " in ctx.command_path else "loopx --help"
            ctx.fail(f"No such command {name!r}.{hint} (see `{where}`)")
        return super().resolve_command(ctx, args)


LoopxGroup.group_class = LoopxGroup


def fail(err: LoopxError, ctx: click.Context | None = None) -> NoReturn:
    """Print ``err`` the way the current format wants and exit with its status."""
    import os

    if err.code == "actor_forbidden" and "LOOPX_RUN_ID" in os.environ:
        # Say why a user's command was refused: it runs inside a governed step.
        err.message += (f" (LOOPX_RUN_ID is set: a command started inside run {os.environ['LOOPX_RUN_ID']}"
                        " acts as the executor)")
    show_error(err, as_json=wants_json(ctx), ctx=ctx)
    sys.exit(err.exit_code)


def show_error(err: LoopxError, *, as_json: bool, ctx: click.Context | None = None, args=()) -> None:
    """Print ``err``: the one renderer of every error path of the CLI (a refusal, a usage error,
    a full disk). Its message (and details) scrubbed of secrets (:func:`scrub`); as text one line
    on stderr, ``loopx: error: MESSAGE [CODE]``, every control character (newline included)
    shown escaped, so a file name or message an agent chose can neither drive the terminal nor
    forge a second error line; as JSON ``{"error": {...}}`` on stdout (JSON escapes them itself)."""
    err.message = scrub(err.message, ctx, args)
    err.details = _scrub_all(err.details, ctx, args)
    if as_json:
        click.echo(json.dumps(err.to_json()))
    else:
        from loopx.values.terminal import safe

        line = safe(f"loopx: error: {err.message.rstrip()} [{err.code}]")
        click.echo(line.replace("\n", "\\n"), err=True)


def _scrub_all(value, ctx, args):
    if isinstance(value, str):
        return scrub(value, ctx, args)
    if isinstance(value, dict):
        return {k: _scrub_all(v, ctx, args) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_all(v, ctx, args) for v in value]
    return value


#: Environment variables whose values are secrets an error message must never show: LoopX's own
#: tokens, and the agent CLIs' API keys (Codex's is read from the variable LOOPX_CODEX_ENV_KEY names).
SECRET_ENV = ("LOOPX_BROKER_TOKEN", "LOOPX_STATUS_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
# token=VALUE, api_key=VALUE and the like in a URL's query or a key=value string.
_TOKEN_PARAM = r"(?i)((?:^|[?&\s;])(?:access_)?(?:token|api_?key|secret)\s*=\s*)[^&\s#;]+"


def scrub(message: str, ctx: click.Context | None = None, args=()) -> str:
    """``message`` without secrets: the passwords of any registry URL this command was given
    (``--registry``, ``LOOPX_REGISTRY``, ``--from`` / ``--to``; an exception may quote them), the
    values of :data:`SECRET_ENV` and of a ``--token`` option, and any ``token=VALUE`` it holds."""
    import os
    import re

    from loopx.store import redact_text

    ctx = ctx or click.get_current_context(silent=True)
    urls = [os.environ.get("LOOPX_REGISTRY"), *(a for a in args or () if isinstance(a, str))]
    tokens = [os.environ.get(name) for name in (*SECRET_ENV, os.environ.get("LOOPX_CODEX_ENV_KEY") or "")]
    while ctx is not None:
        urls.append(ctx.meta.get(REGISTRY_KEY))
        urls += [v for v in (ctx.params or {}).values() if isinstance(v, str)]
        tokens.append((ctx.params or {}).get("token"))
        ctx = ctx.parent
    for url in urls:
        message = redact_text(message, url)
    for token in sorted({t for t in tokens if isinstance(t, str) and len(t) >= 8}, key=len, reverse=True):
        message = message.replace(token, "***")
    return re.sub(_TOKEN_PARAM, r"\1***", message)


def emit(data, text=None) -> None:
    """Print ``data``: JSON under ``--format json``, else ``text(data)`` (or a JSON fallback).

    The text is stored text an agent may have written: its control characters are shown escaped
    (:func:`loopx.values.terminal.safe`), never sent to the terminal.
    """
    from loopx.values.jsonsafe import dumps_out, escaped
    from loopx.values.terminal import safe

    if wants_lines():
        # JSON Lines: a list one item a line, anything else on one line.
        for item in data if isinstance(data, list) else [data]:
            click.echo(dumps_out(item, separators=(",", ":")))
    elif wants_json():
        click.echo(dumps_out(data, indent=2))
    elif text is not None:
        out = text(data)
        if out:
            try:
                out.encode("utf-8")
            except UnicodeEncodeError:  # text from an older registry: show it escaped, never crash
                out = escaped(out)
            click.echo(safe(out))
    else:
        click.echo(dumps_out(data, indent=2))


def emit_stream(items, line) -> None:
    """Print an iterable of JSON-ready items as it is read, in bounded memory: one ``line(item)``
    each (text), one compact JSON document each (``--format jsonl``), or a JSON array written
    item by item, the same text ``emit`` prints for the whole list (``--format json``)."""
    from contextlib import closing, nullcontext

    with closing(items) if hasattr(items, "close") else nullcontext():
        _emit_stream(items, line)


def _emit_stream(items, line) -> None:
    # The stream is closed by emit_stream before the registry it reads is (a reader that goes
    # away early, `| head`, must not leave the generator to be closed after the connection).
    from loopx.values.jsonsafe import dumps_out, escaped
    from loopx.values.terminal import safe

    if wants_lines():
        for item in items:
            click.echo(dumps_out(item, separators=(",", ":")) + "\n", nl=False)
    elif wants_json():
        first = True
        for item in items:
            text = dumps_out(item, indent=2).replace("\n", "\n  ")
            click.echo(("[\n  " if first else ",\n  ") + text, nl=False)
            first = False
        click.echo("[]" if first else "\n]")
    else:
        empty = True
        for item in items:
            text = line(item)
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # text from an older registry: show it escaped, never crash
                text = escaped(text)
            # Stored text reaches a terminal here too: control characters shown escaped, as emit() does.
            click.echo(safe(text) + "\n", nl=False)
            empty = False
        if empty:
            click.echo(safe(line(None)) + "\n", nl=False)


def registry_url(url: str | None = None) -> str | None:
    """The registry URL in force: ``url``, else ``--registry`` of the running command, else ``None``
    ("``LOOPX_REGISTRY``, else the default location" to :func:`open_registry`)."""
    if url:
        return url
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(REGISTRY_KEY) if ctx is not None else None


def open_registry(url: str | None = None, *, readonly: bool = False) -> Registry:
    """Open the registry: ``url``, else the running command's ``--registry``, else
    ``LOOPX_REGISTRY``, else the default location. Works inside a click command and outside one
    (a script, a test, a hook). A context manager: ``with open_registry() as reg:``.
    """
    from loopx.ledger.registry import Registry

    url = registry_url(url)
    if step_registry is not None and not readonly:
        from loopx.ledger.registry import resolve_url

        if resolve_url(url) == step_registry[0]:
            return step_registry[1].lend()  # a step run by hand opened it already (loopx/cli/steprun.py)
    # create=False: a registry file that does not exist is refused for reading
    # (registry_not_found) and created only by the first write.
    return Registry.open(url, readonly=readonly, create=False)


#: ``(resolved url, Registry)`` while a capability's step run by hand runs its command
#: (:func:`loopx.cli.steprun.run_recorded`): that registry, opened read-write, is lent to the
#: command's read-write :func:`open_registry` of the same URL instead of opening it again.
step_registry: tuple | None = None


def set_output_format(fmt: str, ctx=None) -> None:
    """Make the running command print ``"json"`` or ``"text"`` (for a command that takes its own
    ``--json`` flag instead of being a :class:`LoopxCommand`)."""
    (ctx or click.get_current_context()).meta[FORMAT_KEY] = fmt


def actor() -> str:
    """The actor this command acts as: ``executor`` inside a step, else ``user`` (``LOOPX_ACTOR``
    may only downgrade; see :func:`loopx.ledger.registry.current_actor`)."""
    from loopx.ledger.registry import current_actor

    return current_actor()


AGENT_HELP = "Who acts (default: env LOOPX_AGENT); refused with run_not_yours if the run is another agent's."


def agent_claim(agent: str | None) -> str | None:
    """Who the caller says it is: ``--agent``, else ``LOOPX_AGENT``, else ``None`` (nobody in particular)."""
    import os

    return agent if agent is not None else (os.environ.get("LOOPX_AGENT") or None)


def check_inside(run_id: str | None) -> None:
    """Refuse (``run_not_yours``) acting on another run from inside a governed step of one run."""
    from loopx.ledger.registry import inside_run

    inside = inside_run()
    if inside is not None and run_id is not None and run_id != inside:
        raise LoopxError("run_not_yours", f"this command runs inside run {inside}; it may not act on run {run_id}")


def operation_option(fn: _F) -> _F:
    """The ``--operation-id`` option every mutating command takes."""
    return click.option(
        "--operation-id",
        default=None,
        help="Idempotency key: a retry with the same id returns the first result and writes nothing.",
    )(fn)

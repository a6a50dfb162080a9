"""The ``loopx`` command line: parse, make one call, render.

Subcommands load lazily from :data:`COMMANDS` so that ``loopx quota should-run`` imports only
what it needs; plugins add commands through the ``loopx_register_commands`` hook.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading

import click

from loopx import __version__
from loopx.cli.output import REGISTRY_KEY, LoopxGroup, wants_json
from loopx.values.errors import LoopxError

# name -> "module:attribute": each command lives in loopx/cli/<name with _ for ->.py (tests/test_cli_modules.py
# keeps it so); what several commands share lives in the helper modules named in HELPERS. Hyphenated names are
# canonical; the seed's underscore spellings (`project_prompt`, `summary_all`) are promises to users and keep
# working as aliases.
COMMANDS = {
    "project-prompt": "loopx.cli.project_prompt:project_prompt",
    "history": "loopx.cli.history:history",
    "plugins": "loopx.cli.plugins:plugins_command",
    "quota": "loopx.cli.quota:quota",
    "action": "loopx.cli.action:action",
    "exec": "loopx.cli.exec:exec_command",
    "evidence": "loopx.cli.evidence:evidence",
    "run": "loopx.cli.run:run",
    "turn": "loopx.cli.turn:turn",
    "loop": "loopx.cli.loop:loop",
    "demo": "loopx.cli.demo:demo",
    "schema": "loopx.cli.schema:schema",
    "gate": "loopx.cli.gate:gate",
    "todo": "loopx.cli.todo:todo",
    "handoff": "loopx.cli.handoff:handoff",
    "reward": "loopx.cli.reward:reward",
    "summary-all": "loopx.cli.summary_all:summary_all",
    "status": "loopx.cli.status:status",
    "status-server": "loopx.cli.status_server:status_server",
    "capabilities": "loopx.cli.capabilities:capabilities",
    "registry": "loopx.cli.registry:registry",
    "agent-prompt": "loopx.cli.agent_prompt:agent_prompt",
    "mcp": "loopx.cli.mcp:mcp_command",
    "worker": "loopx.cli.worker:worker",
    "config": "loopx.cli.config:config",
    "notify": "loopx.cli.notify:notify",
    "doctor": "loopx.cli.doctor:doctor",
    "workspace": "loopx.cli.workspace:workspace",
}
#: The modules of loopx/cli that hold no command: what the commands share.
HELPERS = {
    "output": "options, output formats, errors and the registry a command opens",
    "ids": "goal / todo / gate / run ids given whole or as a unique prefix",
    "examples": "the example that ends each command's --help",
    "steprun": "a capability's command run by hand as a step records its result",
    "turn_common": "the options and text that `turn` and `loop` share",
    "op_options": "the options of the agent-facing commands, from their declaration in loopx.operations",
}
ALIASES = {"agent_prompt": "agent-prompt", "project_prompt": "project-prompt", "summary_all": "summary-all",
           "status_server": "status-server"}


#: Held while one thread loads the plugins' commands (see :meth:`RootGroup._load_plugin_commands`).
_PLUGIN_COMMANDS = threading.RLock()


class RootGroup(LoopxGroup):
    """The root group: built-in commands load on demand; plugin commands through a hook."""

    #: The plugin manager whose plugins' commands ``self.commands`` holds. The manager is rebuilt
    #: when ``LOOPX_PLUGINS`` / ``LOOPX_DISABLE_PLUGINS`` change, and an in-process CLI (a plugin
    #: author's ``loopx_cli``) must then show the commands of the plugins now chosen.
    _plugin_commands_of = None
    _plugin_commands_ready = None
    aliases = ALIASES

    def _load_plugin_commands(self):
        from loopx.seam import plugins

        pm = plugins.get_plugin_manager()
        if self._plugin_commands_ready is not pm:
            # A turn's broker serves commands side by side (loopx.values.served): one thread loads them,
            # the others wait for the whole set (a plugin asking for commands meanwhile, in the
            # loading thread, sees what is there so far, as before).
            with _PLUGIN_COMMANDS:
                if self._plugin_commands_of is not pm:
                    # Built-in commands load from COMMANDS and are never added here: everything in
                    # self.commands came from the former manager's plugins.
                    self.commands.clear()
                    self._plugin_commands_of = pm
                    # One plugin's broken commands hook costs that plugin its commands, nothing more.
                    plugins.hooks().register_commands(self)
                    self._plugin_commands_ready = pm

    def main(self, args=None, prog_name=None, **extra):
        """Run the CLI; usage errors become LoopX errors (one line, ``invalid_argument``, exit 2)."""
        args = list(sys.argv[1:] if args is None else args)
        extra.pop("standalone_mode", None)
        if "--run-id" in args or "LOOPX_RUN_ID" in os.environ:
            # A capability's command run by hand as a step records its result (steprun).
            from loopx.cli import steprun

            target = steprun.match(args, builtin=set(COMMANDS) | set(ALIASES))
            if target is not None:
                return steprun.run_recorded(target, lambda: self._main(args, prog_name, extra))
        return self._main(args, prog_name, extra)

    def _main(self, args, prog_name, extra):
        try:
            return super().main(args=args, prog_name=prog_name or "loopx", standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())  # `loopx` alone: the help, as asked
            sys.exit(0)
        except click.ClickException as exc:
            # One line, like every other error (the usage block is one `--help` away).
            from loopx.cli.output import show_error

            ctx = getattr(exc, "ctx", None)
            message = " ".join(exc.format_message().split())
            if ctx is not None and isinstance(exc, click.UsageError) and "--help" not in message:
                message += f" (see `{ctx.command_path} --help`)"
            show_error(LoopxError("invalid_argument", message), ctx=ctx, args=args,
                       as_json=(ctx is not None and wants_json(ctx)) or _json_requested(args))
            sys.exit(2)
        except OSError as exc:
            # A write outside the store (a backup, a file a plugin writes) on a full disk: one line.
            from loopx.cli.output import show_error
            from loopx.store.space import NO_SPACE, disk_full

            if exc.errno not in NO_SPACE:
                raise
            err = disk_full(exc.filename or "a file", exc.strerror or "")
            show_error(err, as_json=_json_requested(args), args=args)
            sys.exit(err.exit_code)
        except LoopxError as err:
            # Raised while parsing, e.g. an id prefix that is ambiguous or matches nothing.
            from loopx.cli.output import show_error

            show_error(err, as_json=_json_requested(args), args=args)
            sys.exit(err.exit_code)

    def invoke(self, ctx):
        """Run the command; a reader that went away early (``| head``) ends it quietly, status 0
        (click alone would exit 1)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            from loopx.values.terminal import closed_pipe

            closed_pipe()

    def list_commands(self, ctx):
        self._load_plugin_commands()
        names = set(self.commands) | {n for n in COMMANDS if _available(n)}
        return sorted(names)

    def get_command(self, ctx, name):
        name = ALIASES.get(name, name)
        target = COMMANDS.get(name)
        if target is not None and _available(name):
            module, attr = target.split(":")
            return getattr(importlib.import_module(module), attr)
        self._load_plugin_commands()
        return self.commands.get(name)


def _available(name: str) -> bool:
    module = COMMANDS[name].split(":")[0]
    return importlib.util.find_spec(module) is not None


def _print_version(ctx, param, value):
    # Not click.version_option: its translated help text makes every start-up search for
    # gettext catalogues.
    if value and not ctx.resilient_parsing:
        click.echo(f"loopx {__version__}")
        ctx.exit()


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--registry", "registry_url", envvar="LOOPX_REGISTRY", default=None,
              help="Registry path or URL (default: the user data directory; env LOOPX_REGISTRY).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print LoopX's version.")
@click.pass_context
def cli(ctx, registry_url):
    """LoopX: durable goals, interaction contracts and human gates for long-running agents.

    Before every turn an agent runs `loopx quota should-run --goal-id G` and does only the
    actions the contract lists.
    """
    ctx.meta[REGISTRY_KEY] = registry_url
    if "LOOPX_ACTOR" in os.environ and not ctx.resilient_parsing:
        # A misspelt actor is refused by every command, reads too (`invalid_actor`), not only
        # by the writes that ask who is acting.
        from loopx.ledger.registry import current_actor

        current_actor()


def _json_requested(args: list[str]) -> bool:
    for i, arg in enumerate(args):
        if arg in ("--json", "--format=json", "--format=jsonl") or (
                arg == "--format" and args[i + 1 : i + 2] in (["json"], ["jsonl"])):
            return True
    return False


def main(argv=None):
    """The command line in this process. The ``loopx`` command enters through :mod:`loopx.entry`,
    which first forwards a confined step's command to its broker (:mod:`loopx.turn.broker`)."""
    cli.main(args=argv, prog_name="loopx")


def path_options(command: list[str]) -> list[tuple[str, str]]:
    """``[(option, path)]`` that ``command`` (argv after the global options) gives its command's
    path parameters: those declared ``click.Path`` or ``click.File`` (a built-in's or a plugin's),
    the one declaration a turn's broker reads to keep a step to its own files."""
    ctx = click.Context(cli, resilient_parsing=True)
    cmd, args = cli, list(command)
    try:
        while isinstance(cmd, click.Group):
            _, rest, _ = cmd.make_parser(ctx).parse_args(args)  # stops at the subcommand
            if not rest:
                return []
            cmd, args = cmd.get_command(ctx, rest[0]), rest[1:]
            if cmd is None:
                return []  # no such command: it runs nothing
            ctx = click.Context(cmd, parent=ctx, info_name=rest[0], resilient_parsing=True)
        values, _, _ = cmd.make_parser(ctx).parse_args(args)
    except click.UsageError:
        return []  # the command itself fails to parse the same way, before it runs
    found = []
    for param in cmd.params:
        if not isinstance(param.type, (click.Path, click.File)) or values.get(param.name) is None:
            continue
        given = values[param.name]
        for value in given if isinstance(given, (list, tuple)) else [given]:
            if value != "-":  # stdin / stdout
                found.append((param.opts[0] if isinstance(param, click.Option) else param.human_readable_name,
                              str(value)))
    return found


class _InProcess:
    """The CLI in this process, as a turn's broker uses it: runs a command (the broker's cheap
    path; exits with ``SystemExit`` like ``main``) and names the paths a command would touch."""

    def __call__(self, argv: list[str]) -> None:
        cli.main(args=argv, prog_name="loopx")

    @staticmethod
    def path_options(command: list[str]) -> list[tuple[str, str]]:
        """:func:`path_options`."""
        return path_options(command)


run_inprocess = _InProcess()

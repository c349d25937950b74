"""Assembles the ``pippa`` typer app and owns the one top-level error handler.

Command groups live in their own modules (``register(app)``) and are imported only when one of
their commands runs: ``pippa sync`` never loads textual (dash) or the run/tmux code, and
``pippa --help`` loads no command module at all. ``cli.app.COMMANDS``, handed to ``build``, is what
``--help`` lists; a test checks it against each command's own docstring. Core errors (``PippaError``)
become one line on stderr and their exit code; a traceback (and asyncssh's log) only with ``--debug``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback

import typer
from typer.core import TyperGroup

from pippa_ops.errors import ExitCode, PippaError


class PippaCommand(typer.core.TyperCommand):
    """Usage lines name arguments the usual way (``pippa logs [OPTIONS] NAME``), not ``{name}``."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, typer.core.TyperArgument):
                name = (param.metavar or param.name or "arg").upper()
                pieces.append((name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else ""))
        return pieces


def load_commands(module_name: str) -> dict[str, typer.core.TyperCommand]:
    """Import one command module and build its click commands (name -> command).

    Help is click's plain layout (``rich_markup_mode=None``): typer's rich panels cost ~0.3 s per
    ``--help`` to draw and label every flag ``<bool>``."""
    module = importlib.import_module(module_name)
    sub = typer.Typer(add_completion=False, rich_markup_mode=None)
    sub.callback()(lambda: None)  # always a group, even for a module with one command
    module.register(sub)
    for info in sub.registered_commands:
        if info.cls in (None, typer.core.TyperCommand):
            info.cls = PippaCommand
    group = typer.main.get_command(sub)
    assert isinstance(group, TyperGroup)
    return dict(group.commands)  # type: ignore[arg-type]


Table = dict[str, tuple[str, str]]  # command -> (module that registers it, its one-line help)


# What other tools call a command (git status, kubectl logs, docker exec): the word a user types first.
OTHER_NAMES = {
    "status": "ps",
    "list": "ps",
    "top": "dash",
    "log": "logs",
    "kill": "stop",
    "start": "run",
    "exec": "ssh",
    "shell": "ssh",
    "setup": "up",
    "push": "sync",
    "fetch": "pull",
}


class _LazyGroup(TyperGroup):
    """Lists every command of its table; imports a command's module only to run (or show) it."""

    table: Table = {}  # noqa: RUF012  (set per instance by ``build``)

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return list(self.table)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> typer.core.TyperCommand | None:  # type: ignore[override]
        if cmd_name in self.commands:
            return self.commands[cmd_name]  # type: ignore[return-value]
        if cmd_name not in self.table:
            return None
        # Listed, not loaded: a stub with the help line is enough for `pippa --help` (short_help: whole,
        # where click would cut it at the terminal's width with "...").
        line = self.table[cmd_name][1]
        return typer.core.TyperCommand(cmd_name, help=line, short_help=line)

    def load(self, name: str) -> None:
        """Build the commands of ``name``'s module (the warm process does it ahead for the hot verbs)."""
        if name in self.table and name not in self.commands:
            for cmd_name, cmd in load_commands(self.table[name][0]).items():
                self.commands[cmd_name] = cmd

    def resolve_command(self, ctx: typer.Context, args: list[str]):  # type: ignore[no-untyped-def,override]
        name = args[0] if args else None
        if name is not None:
            self.load(name)
        try:
            return super().resolve_command(ctx, args)
        except typer.TyperException as e:  # click's "No such command 'sttus'.": add the nearest one
            if name is not None and name not in self.table and hasattr(e, "message"):
                import difflib

                close = difflib.get_close_matches(name, [*self.table, *OTHER_NAMES], n=1, cutoff=0.6)
                if name in OTHER_NAMES:  # `pippa status`: another tool's word for a pippa command
                    e.message += f" pippa's {name} is `pippa {OTHER_NAMES[name]}`."
                elif close and close[0] in OTHER_NAMES:  # `pippa stauts`: pippa's status is `ps`
                    e.message += f" Did you mean {close[0]!r}? That is `pippa {OTHER_NAMES[close[0]]}`."
                elif close:
                    e.message += f" Did you mean {close[0]!r}?"
            raise


app = typer.Typer(
    name="pippa",
    cls=_LazyGroup,
    help="Train language models with RL on a few GPU hosts: hosts, sync, runs in tmux, GPUs, dashboard.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

_state = {"debug": False}


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"pippa {version('pippa')}")
        except PackageNotFoundError:
            from pippa_ops import __version__

            typer.echo(f"pippa {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    _version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_show_version, help="Print pippa's version and exit."
    ),
    no_reuse: bool = typer.Option(
        False,
        "--no-reuse",
        help="Connect directly, not through the connection keeper's kept SSH connections "
        "(also PIPPA_NO_REUSE=1).",
    ),
) -> None:
    _state["debug"] = debug
    from pippa_ops.transport import reuse

    reuse.configure(not no_reuse)


def fail(message: str, code: ExitCode) -> None:
    """Print one line for people and exit with ``code``. An error may quote a host (its stderr):
    escape sequences never reach the terminal (``termsafe``)."""
    from pippa_contract.termsafe import terminal_text

    typer.echo(f"pippa: {terminal_text(message.encode('utf-8', 'replace'), keep_sgr=False)}", err=True)
    raise SystemExit(int(code))


def _debug_logging() -> None:
    """--debug: asyncssh's own log (handshake, auth, channel errors) on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    log = logging.getLogger("asyncssh")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


def build(commands: Table) -> _LazyGroup:
    """The app as a click group listing ``commands`` (``cli.app.COMMANDS``); a process may build it once
    and run it several times (``main``)."""
    group = typer.main.get_command(app)
    assert isinstance(group, _LazyGroup)
    group.table = commands
    return group


def main(commands: Table, group: _LazyGroup | None = None) -> None:
    """Run ``sys.argv`` (on ``group``, built from ``commands`` when not given) and exit with its code."""
    debug = "--debug" in sys.argv[1:]
    if debug:
        _debug_logging()
    try:
        rv = (group or build(commands))(standalone_mode=False)
    except PippaError as e:
        if debug:
            traceback.print_exc()
        fail(str(e), e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        if debug:
            traceback.print_exc()
        fail("interrupted", ExitCode.INTERRUPTED)
    except typer.Exit as e:
        raise SystemExit(e.exit_code) from None
    except typer.TyperException as e:  # click's usage errors (typer vendors click): usage + one line
        show = getattr(e, "show", None)
        if callable(show):
            show()
        else:
            typer.echo(f"pippa: {e.format_message()}", err=True)
        raise SystemExit(e.exit_code) from None
    raise SystemExit(rv if isinstance(rv, int) else 0)

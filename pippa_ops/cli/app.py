"""Assembles the ``pippa`` command and owns the one top-level error handler.

Command groups live in their own modules and register themselves on ``app``. Core errors
(``PippaError``) become one line on stderr and their exit code; a traceback only with ``--debug``.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click
import typer

from pippa_ops.errors import ExitCode, PippaError

app = typer.Typer(
    name="pippa",
    help="Train language models with RL on a few GPU hosts: hosts, sync, runs in tmux, GPUs, dashboard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_state = {"debug": False}

# Each module defines ``register(app)``; the order is the order of `pippa --help`.
_COMMAND_MODULES = (
    "pippa_ops.cli.hosts_cmd",  # hosts, up, sync
    "pippa_ops.cli.run_cmd",  # run, ps, logs, attach, stop, recipes
    "pippa_ops.cli.gpus_cmd",  # gpus
    "pippa_ops.cli.dash_cmd",  # dash
)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    _state["debug"] = debug


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # that command group is not in this checkout
                continue
            raise
        module.register(app)


_register_all()


def fail(message: str, code: ExitCode) -> None:
    """Print one line for people and exit with ``code``."""
    typer.echo(f"pippa: {message}", err=True)
    raise SystemExit(int(code))


def main() -> None:
    debug = "--debug" in sys.argv[1:]
    try:
        rv = app(standalone_mode=False)
    except PippaError as e:
        if debug:
            traceback.print_exc()
        fail(str(e), e.exit_code)
    except click.exceptions.Abort:
        fail("interrupted", ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        fail("interrupted", ExitCode.INTERRUPTED)
    except click.ClickException as e:
        e.show()
        raise SystemExit(e.exit_code) from None
    except click.exceptions.Exit as e:
        raise SystemExit(e.exit_code) from None
    raise SystemExit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()

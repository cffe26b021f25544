"""The Typer application behind ``runledger``: commands loaded on demand, one error policy.

Each module of :mod:`runledger.commands` registers its commands on a Typer app
(``register(app)``). The root group (:class:`_Runledger`) lists the commands of
``runledger.cli.SECTIONS`` and imports a command's module only when that
command is asked for, so a command pays only for what it uses; commands
registered on :data:`app` directly are found first. Commands raise; this module
alone turns an error into output: every error of
:data:`runledger.errors.EXIT_STATUS` becomes ``runledger: <message>`` on stderr
and the exit status that table gives, Ctrl-C becomes ``runledger: interrupted``
and 130. Anything else is a bug and keeps its traceback.

Tested in tests/runledger/test_cli.py.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from runledger.cli import ABOUT, COMMANDS, PROG, root_help
from runledger.errors import REPORTED, Interrupted, exit_status, message


def load(name: str) -> Any:
    """The click command ``name`` as its module registers it (imports that module)."""
    entry = COMMANDS[name]
    module = importlib.import_module(entry.module)
    scratch = typer.Typer(pretty_exceptions_enable=False)
    module.register(scratch)
    group = typer.main.get_group(scratch)
    return group.get_command(typer.Context(group), name)


class _Runledger(TyperGroup):
    """The root command group; every command runs inside its :meth:`invoke`."""

    def list_commands(self, ctx: Any) -> list[str]:
        eager = [n for n in super().list_commands(ctx) if n not in COMMANDS]
        return [*COMMANDS, *eager]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in COMMANDS:
            found = load(cmd_name)
        return found

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # The table's help, without importing every command to ask each for its own.
        formatter.write(root_help())

    def invoke(self, ctx: Any) -> Any:
        error: Exception
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            error = Interrupted()
        except REPORTED as exc:
            error = exc
        typer.echo(f"{PROG}: {message(error)}", err=True)
        raise typer.Exit(exit_status(error))


app = typer.Typer(
    name=PROG,
    cls=_Runledger,
    help=ABOUT,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # A callback makes the app a group of its own even before any command is loaded.
    pass


def main() -> None:
    app(prog_name=PROG)

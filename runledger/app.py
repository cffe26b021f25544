"""The Typer application behind ``runledger``: commands loaded on demand, one error policy.

Each module of :mod:`runledger.commands` registers its commands on a Typer app
(``register(app)``). The root group (:class:`_Runledger`) lists the commands of
``runledger.commandtable.SECTIONS`` and imports a command's module only when that
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

try:  # typer 0.2x vendors click; earlier versions use the click package
    from typer._click.exceptions import (  # type: ignore[import-not-found,unused-ignore]
        ClickException,
        NoArgsIsHelpError,
        UsageError,
    )
except ImportError:  # pragma: no cover
    from click.exceptions import (  # type: ignore[import-not-found,no-redef,unused-ignore]
        ClickException,
        NoArgsIsHelpError,
        UsageError,
    )

from runledger.commandtable import ABOUT, COMMANDS, PROG, root_help
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


def run(args: list[str]) -> None:
    """Run one command line: a usage error (an unknown command or option, a missing or
    bad argument: Typer's) is one line naming what to fix and ``--help``, exit status 2,
    like every other error here; the rest is :class:`_Runledger`'s policy."""
    try:
        status = app(prog_name=PROG, args=args, standalone_mode=False)
    except NoArgsIsHelpError as exc:  # a group named without its command: its help
        exc.show()
        raise SystemExit(2) from None
    except UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else PROG
        typer.echo(f"{PROG}: {usage_line(exc.format_message(), where)}", err=True)
        raise SystemExit(2) from None
    except ClickException as exc:
        typer.echo(f"{PROG}: {exc.format_message()}", err=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        typer.echo(f"{PROG}: interrupted", err=True)
        raise SystemExit(130) from None
    raise SystemExit(status if isinstance(status, int) else 0)


def usage_line(problem: str, command_path: str) -> str:
    """One line: what is wrong with the command line, and where its usage is told."""
    flat = " ".join(problem.split()).rstrip(".")
    return f"{flat} (in `{command_path}`); `{command_path} --help` says what it takes"


def main() -> None:
    import sys

    run(sys.argv[1:])

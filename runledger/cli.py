"""The ``runledger`` console script: assembles the commands and applies one error policy.

Each module of :mod:`runledger.commands` registers its commands on :data:`app`.
Commands raise; this module alone turns an error into output: every error of
:data:`runledger.errors.EXIT_STATUS` becomes ``runledger: <message>`` on stderr
and the exit status that table gives, Ctrl-C becomes ``runledger: interrupted``
and 130. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from runledger.commands import (
    agent,
    audit,
    checkpoint,
    controller,
    dataset,
    demo,
    drill,
    events,
    interval,
    keys,
    logs,
    nodes,
    pilot,
    preflight,
    project,
    query,
    report,
    runs,
    security,
    stack,
)
from runledger.errors import REPORTED, Interrupted, exit_status, message


class _Runledger(TyperGroup):
    """The root command group; every command runs inside its :meth:`invoke`."""

    def invoke(self, ctx: Any) -> Any:
        error: Exception
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            error = Interrupted()
        except REPORTED as exc:
            error = exc
        typer.echo(f"runledger: {message(error)}", err=True)
        raise typer.Exit(exit_status(error))


app = typer.Typer(
    name="runledger",
    cls=_Runledger,
    help="Operate event-sourced distributed training runs over Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
# Registration order is the order `runledger --help` lists the commands in.
for command in (stack, security, keys, audit, events, checkpoint, project, query, report,
                dataset, runs, preflight, pilot, drill, logs, nodes, agent, controller, interval,
                demo):
    command.register(app)


def main() -> None:
    app(prog_name="runledger")


if __name__ == "__main__":
    main()

"""The ``runledger`` console script. Thin wiring: the work lives in the modules it calls.

Every :class:`~runledger.errors.StackError` becomes one line on stderr and exit
status 1; tracebacks are kept for real bugs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from runledger import stack
from runledger.commands import interval as intervalcli
from runledger.commands import runs as runcli
from runledger.commands.agent import agent
from runledger.commands.checkpoint import checkpoint_app
from runledger.commands.controller import controller
from runledger.commands.dataset import dataset_app
from runledger.commands.demo import demo
from runledger.commands.events import events_app
from runledger.commands.project import project, replay
from runledger.commands.query import query
from runledger.commands.report import report
from runledger.errors import StackError

app = typer.Typer(
    name="runledger",
    help="Operate event-sourced distributed training runs over Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
stack_app = typer.Typer(
    help=(
        "A local Apache Kafka (KRaft) cluster. Without --data-dir, RUNLEDGER_BOOTSTRAP points"
        " up (topics only) and status at an existing cluster instead."
    ),
    no_args_is_help=True,
)
app.add_typer(stack_app, name="stack")
app.add_typer(events_app, name="events")
app.add_typer(checkpoint_app, name="checkpoint")
app.command()(project)
app.command()(replay)
app.command()(query)
app.command()(report)
app.add_typer(dataset_app, name="dataset")
app.command()(runcli.submit)
app.command()(runcli.status)
app.command()(runcli.cancel)
app.command()(runcli.runs)
app.command()(agent)
app.command()(controller)
app.command(name="interval")(intervalcli.interval)
app.command()(demo)

T = TypeVar("T")

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="State directory (default $RUNLEDGER_HOME/stack or ~/.local/state/runledger/stack).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _run(action: Callable[[], T]) -> T:
    try:
        return action()
    except StackError as exc:
        typer.echo(f"runledger: {exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        typer.echo("runledger: interrupted", err=True)
        raise typer.Exit(130) from None


def _print_json(doc: dict[str, Any]) -> None:
    typer.echo(json.dumps(doc, indent=2))


@stack_app.command()
def up(
    data_dir: DataDir = None,
    brokers: Annotated[int, typer.Option(help="Nodes: 1, or 3 for replication tests.")] = 1,
    port: Annotated[
        int | None, typer.Option(help="Client port of node 1 (node k gets port+k-1).")
    ] = None,
    as_json: Json = False,
) -> None:
    """Start the cluster and create the runledger topics; print the bootstrap address.

    Idempotent: on a running stack it reports the existing one.
    """
    external = stack.bootstrap_from_env() if data_dir is None else None
    if external is not None:
        info = _run(lambda: stack.cluster_up(external))
    else:
        info = _run(lambda: stack.Stack(data_dir, brokers).up(port=port))
    if as_json:
        _print_json(info.to_json())
    else:
        typer.echo(info.bootstrap)


@stack_app.command()
def down(
    data_dir: DataDir = None,
    purge: Annotated[bool, typer.Option(help="Also delete the data directory.")] = False,
    as_json: Json = False,
) -> None:
    """Stop the brokers this data directory started (never any other process)."""
    target = stack.Stack(data_dir)
    pids = _run(lambda: target.down(purge=purge))
    if as_json:
        _print_json({"data_dir": str(target.data_dir), "stopped": pids, "purged": purge})
    elif pids:
        typer.echo(f"stopped {len(pids)} broker(s) of {target.data_dir}: pids {pids}", err=True)
    else:
        typer.echo(f"no broker of {target.data_dir} was running", err=True)


@stack_app.command()
def status(data_dir: DataDir = None, as_json: Json = False) -> None:
    """Brokers (process alive? port answering?) and topics. Exit 1 if nothing runs."""
    external = stack.bootstrap_from_env() if data_dir is None else None
    if external is not None:
        report = _run(lambda: stack.cluster_status(external))
    else:
        report = _run(lambda: stack.Stack(data_dir).status())
    if as_json:
        _print_json(report.to_json())
    else:
        _print_status(report)
    if not report.running:
        typer.echo(f"runledger: {report.error or 'not running'}", err=True)
        raise typer.Exit(1)


@stack_app.command()
def jars() -> None:
    """Fetch the Kafka jars into the cache (once) and print their directory."""
    from runledger.stack.jars import ensure_jars

    typer.echo(str(_run(ensure_jars)))


def _print_status(report: stack.StackStatus) -> None:
    where = f" ({report.data_dir})" if report.data_dir else ""
    typer.echo(f"bootstrap {report.bootstrap}{where}")
    typer.echo(f"{'node':>4}  {'port':>5}  {'pid':>7}  process  port")
    for b in report.brokers:
        pid = str(b.pid) if b.pid is not None else "-"
        alive = ("alive" if b.alive else "dead") if report.data_dir else "-"
        answering = "answering" if b.answering else "closed"
        typer.echo(f"{b.node_id:>4}  {b.port:>5}  {pid:>7}  {alive:<7}  {answering}")
    if report.topics:
        typer.echo(f"{'topic':<28} {'parts':>5} {'repl':>4}  config")
    for t in report.topics:
        conf = " ".join(f"{k}={v}" for k, v in t.config.items())
        health = f" under_replicated={t.under_replicated}" if t.under_replicated else ""
        health += f" offline={t.offline}" if t.offline else ""
        typer.echo(f"{t.name:<28} {t.partitions:>5} {t.replication:>4}  {conf}{health}")


def main() -> None:
    app(prog_name="runledger")


if __name__ == "__main__":
    main()

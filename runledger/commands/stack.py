"""``runledger stack up|down|status|jars``: the local Kafka cluster, or an existing one.

The work is in :mod:`runledger.stack`. Without ``--data-dir``,
``RUNLEDGER_BOOTSTRAP`` points ``up`` (topics only) and ``status`` at an
existing cluster. ``up`` of a local stack remembers it (:mod:`runledger.current`)
so that every other command finds it; ``down`` forgets it, and ``down`` and
``status`` without ``--data-dir`` act on the remembered one.

Tested in tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from runledger import config, current
from runledger.config import AsJson
from runledger.errors import NotRunningError
from runledger.stack import Stack, StackStatus, cluster_status, cluster_up
from runledger.stack.jars import ensure_jars

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="State directory (default: up: $RUNLEDGER_HOME/stack; down, status: the stack"
             " `up` remembered, else that one).",
    ),
]
Brokers = Annotated[int, typer.Option(help="Nodes: 1, or 3 for replication tests.")]
Port = Annotated[int | None, typer.Option(help="Client port of node 1 (node k gets port+k-1).")]
Purge = Annotated[bool, typer.Option(help="Also delete the data directory.")]
Tls = Annotated[bool, typer.Option(
    "--tls", help="TLS on the client listener, with a CA of the stack's own (DATA_DIR/tls/ca.pem; "
                  "only for a new data dir).")]
Insecure = Annotated[bool, typer.Option(
    "--insecure", help="Plaintext, no authentication, no ACLs (only for a new data dir).")]


def register(app: typer.Typer) -> None:
    stack_app = typer.Typer(
        help=(
            "A local Apache Kafka (KRaft) cluster. Without --data-dir, RUNLEDGER_BOOTSTRAP points"
            " up (topics only) and status at an existing cluster instead."
        ),
        no_args_is_help=True,
    )
    stack_app.command()(up)
    stack_app.command()(down)
    stack_app.command()(status)
    stack_app.command()(jars)
    app.add_typer(stack_app, name="stack")


def up(data_dir: DataDir = None, brokers: Brokers = 1, port: Port = None,
       insecure: Insecure = False, tls: Tls = False, as_json: AsJson = False) -> None:
    """Start the cluster and create the runledger topics; print the bootstrap address.

    Secure by default: SASL/SCRAM-SHA-512, ACLs, deny when none matches; the
    admin's and each role's credentials are written into DATA_DIR/credentials.
    Idempotent: on a running stack it reports the existing one.
    """
    external = config.external_bootstrap() if data_dir is None else None
    if external is not None:
        info = cluster_up(external)
    else:
        local = Stack(data_dir, brokers, secure=False if insecure else None, tls=tls)
        info = local.up(port)
        current.remember(config.home(), local.data_dir)
    if as_json:
        _print_json(info.to_json())
        return
    typer.echo(info.bootstrap)
    if external is None:
        typer.echo(f"remembered in {current.pointer(config.home())}: other commands use this"
                   " stack unless --bootstrap or RUNLEDGER_BOOTSTRAP names another", err=True)
    if info.credentials is not None:
        typer.echo(f"secure: SASL/SCRAM and ACLs; credentials of admin and each role in "
                   f"{info.credentials.parent}/ (commands use {current.ROLE}.properties,"
                   " the controller, agent and projector their role's file, unless"
                   " RUNLEDGER_CREDENTIALS names another)", err=True)


def down(data_dir: DataDir = None, purge: Purge = False, as_json: AsJson = False) -> None:
    """Stop the brokers this data directory started (never any other process)."""
    target = Stack(data_dir or current.remembered_dir(config.home()))
    pids = target.down(purge=purge)
    current.forget(config.home(), target.data_dir)
    if as_json:
        _print_json({"data_dir": str(target.data_dir), "stopped": pids, "purged": purge})
    elif pids:
        typer.echo(f"stopped {len(pids)} broker(s) of {target.data_dir}: pids {pids}", err=True)
    else:
        typer.echo(f"no broker of {target.data_dir} was running", err=True)


def status(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Brokers (process alive? port answering?) and topics. Exit 1 if nothing runs."""
    external = config.external_bootstrap() if data_dir is None else None
    local = data_dir or current.remembered_dir(config.home())
    report = cluster_status(external) if external is not None else Stack(local).status()
    if as_json:
        _print_json(report.to_json())
    else:
        _print_status(report)
    if not report.running:
        raise NotRunningError(report.error or "not running")


def jars() -> None:
    """Fetch the Kafka jars into the cache (once) and print their directory."""
    typer.echo(str(ensure_jars()))


def _print_json(doc: dict[str, Any]) -> None:
    typer.echo(json.dumps(doc, indent=2))


def _print_status(report: StackStatus) -> None:
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

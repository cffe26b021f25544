"""``runledger nodes`` and ``runledger node cordon|uncordon|drain``: the node lifecycle.

``nodes`` folds the agents' reports, each through the controller's door
(``events.kafka.reportdoor``: believed only under its node's key), and the node facts
of ``runledger.runs`` (``runledger.views.nodeview``). ``node enroll`` gives a node its
key (``runledger.commands.enroll``). ``node OPERATION NAME --reason R`` writes a
``NodeOperationRequested`` on ``runledger.requests`` keyed ``node/NAME``,
signed with an operator's key (``--key``, ``RUNLEDGER_KEY`` or the local
stack's ``operator.key``, as ``cancel``); the controller judges it and records
``NodeCordoned``, ``NodeUncordoned`` or a ``WriteRejected``. A node no agent
has registered is refused here, naming it and the known ones, and nothing is
written. The request carries a random event id and the node's operation
epoch as read here (``controller.replays``): a copy of it, or one another
operator's operation overtook, is refused (``replayed``, ``superseded``).
Clocks and ids are read here, at the edge.

Tested in tests/runledger/commands/test_nodes.py.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Annotated

import typer

from controller.replays import epoch_of
from events.model import Header, NodeOperationRequested, node_key
from runledger import config
from runledger.commands.enroll import enroll
from runledger.config import AsJson, Bootstrap, Principal
from runledger.errors import RunledgerError
from runledger.nodelog import node_events
from runledger.signer import ENV_KEY, request_signer, send_request
from runledger.views import nodeview

NodeName = Annotated[str, typer.Argument(metavar="NAME", help="The node, as `runledger nodes` "
                                                              "lists it.")]
Reason = Annotated[str, typer.Option("--reason", help="Why; recorded with the request.")]
KeyOption = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", envvar=ENV_KEY, show_envvar=False,
    help=f"Sign the request with this key file (default ${ENV_KEY}, else the local stack's "
         "keys/operator.key).")]

node_app = typer.Typer(help="Cordon, drain or free a node (signed operator requests); "
                            "enroll one (its key).",
                       no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command()(nodes)
    app.add_typer(node_app, name="node")
    node_app.command("cordon")(cordon)
    node_app.command("uncordon")(uncordon)
    node_app.command("drain")(drain)
    node_app.command("enroll")(enroll)


def nodes(as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Every node: slots, domain, heartbeat age, failures counted against it, state
    (ready, cordoned, draining, quarantined, lost), why and since when, when a
    quarantine expires, and a probation after one."""
    address = config.connect(bootstrap)
    table = nodeview.rows(node_events(address), _now_ms())
    if as_json:
        typer.echo(json.dumps({"nodes": table}, indent=2))
        return
    for line in nodeview.lines(table):
        typer.echo(line)


def cordon(name: NodeName, reason: Reason, principal: Principal = None, as_json: AsJson = False,
           bootstrap: Bootstrap = None, key: KeyOption = None) -> None:
    """Place no new run on the node; runs there keep running and may restart there."""
    _request("cordon", name, reason, principal, as_json, bootstrap, key)


def drain(name: NodeName, reason: Reason, principal: Principal = None, as_json: AsJson = False,
          bootstrap: Bootstrap = None, key: KeyOption = None) -> None:
    """Cordon the node and restart nothing there: its runs finish their generation, and
    a failed one is requeued elsewhere."""
    _request("drain", name, reason, principal, as_json, bootstrap, key)


def uncordon(name: NodeName, reason: Reason, principal: Principal = None,
             as_json: AsJson = False, bootstrap: Bootstrap = None, key: KeyOption = None) -> None:
    """Free the node: lift its cordon, drain and quarantine and clear its failure count."""
    _request("uncordon", name, reason, principal, as_json, bootstrap, key)


def _request(operation: str, name: str, reason: str, principal: str | None, as_json: bool,
             bootstrap: str | None, key: Path | None) -> None:
    if not reason.strip():
        raise RunledgerError("--reason must say why")
    address = config.connect(bootstrap)
    signed = request_signer(address, key, principal, bootstrap)
    who = signed.principal
    seen = node_events(address)
    nodeview.check_known(name, seen)
    nkey = node_key(name)
    event_id = f"{nkey}/{operation}/{uuid.uuid4().hex[:12]}"
    # The node as seen here: the controller refuses it if another operation overtook it.
    event = NodeOperationRequested(
        header=Header(event_id, nkey, 0, _now_ms(), f"cli/{who}"), node=name,
        operation=operation, principal=who, reason=reason, epoch=epoch_of(name, seen))
    send_request(address, event, signed.key)
    if as_json:
        typer.echo(json.dumps({"node": name, "operation": operation, "event_id": event_id,
                               "principal": who,
                               "key_id": signed.key.key_id}))
    else:
        typer.echo(f"{operation} of {name} requested by {who} ({event_id}); the controller "
                   "decides: `runledger nodes` shows the result")


# What nodeview folds of runledger.runs: the node facts and the failures it counts.
def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["cordon", "drain", "nodes", "register", "uncordon"]

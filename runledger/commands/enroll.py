"""``runledger node enroll NAME --admin-key FILE``: give a node its own key, registered.

Writes the node's Ed25519 key file (``--key``, default ``./node.NAME.key``,
mode 0600, never overwritten) when it is missing and registers its public key
on ``runledger.keys`` to the principal ``node.NAME`` with the role ``agent``,
signed by the admin key, with the admin's Kafka credentials
(``RUNLEDGER_CREDENTIALS``), as ``key register`` does
(:mod:`runledger.nodekeys`). Copy the file to the node and start its agent with
``--node-key FILE``; enrolling again with the same file changes nothing.

Tested in tests/runledger/commands/test_enroll.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from events.kafka.reportdoor import node_principal
from events.names import host_problem
from runledger import config, keylog
from runledger.commands.keys import principal_of
from runledger.config import AsJson, Bootstrap
from runledger.errors import UsageError
from runledger.nodekeys import enroll as enroll_node
from runledger.signer import load_key

NodeName = Annotated[str, typer.Argument(metavar="NAME", help="The node's name, as its "
                                                              "agent's --node.")]
KeyOut = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE",
    help="The node's key file: made (0600) if missing, else registered as it is "
         "(default ./node.NAME.key).")]
AdminKey = Annotated[Path, typer.Option(
    "--admin-key", metavar="FILE", help="The admin key file that signs the key record.")]


def enroll(name: NodeName, admin_key: AdminKey, key: KeyOut = None, as_json: AsJson = False,
           bootstrap: Bootstrap = None) -> None:
    """Make the node's key (if missing) and register it as node.NAME's agent key.

    Needs the admin's Kafka credentials, like `runledger key register`.
    """
    problem = host_problem(name, "NAME")
    if problem is not None:
        raise UsageError(problem)
    target = key or Path(f"{node_principal(name)}.key")
    admin = load_key(admin_key, "--admin-key")
    address = config.connect(bootstrap)
    ring = keylog.load_ring(address, patience_s=config.retry_s()).ring
    signed, said = enroll_node(address, name, target, admin,
                               by=f"cli/{principal_of(admin, ring)}")
    if as_json:
        typer.echo(json.dumps({"node": name, "principal": node_principal(name),
                               "key_id": signed.key_id, "file": str(target)}))
    else:
        typer.echo(said)
    typer.echo(f"start the agent of {name} with --node-key {target} (keep the file on that "
               "node, readable by the agent's user only)", err=True)

"""``runledger agent``: the node agent's command line. The work is in ``controller.agent``."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from controller.agent import Agent, AgentOptions
from controller.agent_decide import AgentConfig
from controller.errors import ControllerError
from events.errors import EventsError
from events.kafka import bootstrap_from_env, check_broker


def default_work_dir(node: str) -> Path:
    home = os.environ.get("RUNLEDGER_HOME") or "~/.local/state/runledger"
    return Path(home).expanduser() / "agent" / node


def agent(
    node: Annotated[str, typer.Option("--node", help="This node's name, unique in the cluster.")],
    slots: Annotated[int, typer.Option("--slots", min=1, help="Worker slots (e.g. GPUs).")],
    domain: Annotated[
        str, typer.Option("--domain", help="Topology domain (rack, switch) for placement.")
    ] = "default",
    address: Annotated[
        str,
        typer.Option("--address",
                     help="Host name or IP at which other nodes reach this node's workers "
                          "(the rendezvous master when rank 0 runs here)."),
    ] = "127.0.0.1",
    bootstrap: Annotated[
        str | None,
        typer.Option("--bootstrap", help="Kafka bootstrap (default $RUNLEDGER_BOOTSTRAP)."),
    ] = None,
    heartbeat_interval: Annotated[
        float,
        typer.Option("--heartbeat-interval", min=0.05,
                     help="Seconds between agent heartbeats; also the workers' default."),
    ] = 2.0,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir",
                     help="Workers' cwd and logs (<dir>/<run>/g<gen>/<logical id>.log); "
                          "default $RUNLEDGER_HOME/agent/<node>."),
    ] = None,
    grace: Annotated[
        float, typer.Option("--grace", min=0.0, help="Seconds from SIGTERM to SIGKILL.")
    ] = 5.0,
    max_start_age: Annotated[
        float,
        typer.Option("--max-start-age", min=1.0,
                     help="Ignore start commands issued longer ago than this (seconds)."),
    ] = 300.0,
    slot_wait: Annotated[
        float,
        typer.Option("--slot-wait", min=0.0,
                     help="How long a start that finds its slots busy waits for them before "
                          "its members are reported as exit code 125 (seconds)."),
    ] = 15.0,
) -> None:
    """Run a node agent: register slots, heartbeat, launch and stop worker groups on command.

    Stops its workers and exits 0 on SIGTERM or Ctrl-C.
    """
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        kafka = bootstrap_from_env(bootstrap)
        check_broker(kafka)
        config = AgentConfig(node=node, slots=slots, bootstrap=kafka,
                             heartbeat_interval_s=heartbeat_interval,
                             max_start_age_ms=int(max_start_age * 1000),
                             slot_wait_ms=int(slot_wait * 1000))
        options = AgentOptions(domain=domain, address=address,
                               work_dir=work_dir or default_work_dir(node), grace_s=grace)
        code = Agent(config, options).run()
    except (ControllerError, EventsError) as exc:
        typer.echo(f"runledger: {exc}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)

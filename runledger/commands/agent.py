"""``runledger agent``: the node agent's command line. The work is in ``agent.service``.

The node's key, which signs every report, is ``--node-key`` or, on the local
stack, one the agent enrolls itself (``runledger.nodekeys.agent_key``). Its
workers get the worker role's credentials (``--worker-credentials``, by default
``worker.properties`` beside the agent's own file), never the agent's. Each
worker's log is bounded on disk: rotated at ``--log-cap`` (default 64 MiB) with
``--log-keep`` older files (default 3), or ``RUNLEDGER_WORKER_LOG_CAP`` and
``RUNLEDGER_WORKER_LOG_KEEP`` when the options are not given (``agent.logrelay``).
With ``--metrics HOST:PORT`` the agent's own counters and state are served at
``http://HOST:PORT/metrics`` for Prometheus (``agent.metrics``).

Tested in tests/agent/test_service.py and tests/agent/test_metrics.py.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from agent.decide import AgentConfig
from agent.logrelay import DEFAULT_KEEP
from agent.metrics import AgentCollector
from agent.service import Agent, AgentOptions
from events.kafka.connection import ENV_CREDENTIALS
from events.workerenv import CHECKPOINT_ROOT
from runledger import config, nodekeys
from runledger.config import Bootstrap, MetricsAddress
from runledger.errors import UsageError
from runledger.metricsserver import MetricsServer, serve_metrics

# The stack's worker principal's file, beside the agent's (runledger.stack.principals).
WORKER_CREDENTIALS = "worker.properties"
# --log-cap and --log-keep from the environment when not given (a fleet's setting).
LOG_CAP_ENV = "RUNLEDGER_WORKER_LOG_CAP"
LOG_KEEP_ENV = "RUNLEDGER_WORKER_LOG_KEEP"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}

Node = Annotated[str, typer.Option("--node", help="This node's name, unique in the cluster.")]
Slots = Annotated[int, typer.Option("--slots", min=1, help="Worker slots (e.g. GPUs).")]
Domain = Annotated[
    str, typer.Option("--domain", help="Topology domain (rack, switch) for placement.")
]
Address = Annotated[
    str,
    typer.Option("--address",
                 help="Host name or IP at which other nodes reach this node's workers "
                      "(the rendezvous master when rank 0 runs here)."),
]
HeartbeatInterval = Annotated[
    float,
    typer.Option("--heartbeat-interval", min=0.05,
                 help="Seconds between agent heartbeats; also the workers' default."),
]
WorkDir = Annotated[
    Path | None,
    typer.Option("--work-dir",
                 help="Workers' cwd and logs (<dir>/<run>/g<gen>/<logical id>.log); "
                      "default $RUNLEDGER_HOME/agent/<node>."),
]
Grace = Annotated[
    float, typer.Option("--grace", min=0.0, help="Seconds from SIGTERM to SIGKILL.")
]
MaxStartAge = Annotated[
    float,
    typer.Option("--max-start-age", min=1.0,
                 help="Ignore start commands issued longer ago than this (seconds)."),
]
AllowRoot = Annotated[
    list[str] | None,
    typer.Option("--allow-root",
                 help="A directory or fsspec URL under which start commands may put checkpoint "
                      "roots and resume manifests (repeatable). The work dir is always allowed; "
                      "default: also $RUNLEDGER_HOME and $RUNLEDGER_CHECKPOINT_ROOT."),
]
SlotWait = Annotated[
    float,
    typer.Option("--slot-wait", min=0.0,
                 help="How long a start that finds its slots busy waits for them before "
                      "its members are reported as exit code 125 (seconds)."),
]


Allow = Annotated[
    list[str] | None,
    typer.Option("--allow", metavar="EXECUTABLE",
                 help="A program start commands may run (repeatable), resolved at start to "
                      "its real path (a bare name on the agent's PATH); a command runs only "
                      "if its argv[0], found with the worker's own env.PATH, is that file. "
                      "Default: any. An interpreter allowed runs any script."),
]
AllowWorkdir = Annotated[
    list[str] | None,
    typer.Option("--allow-workdir", metavar="DIR",
                 help="A directory under which a start's code.workdir may lie (repeatable), "
                      "besides the work dir and the --allow-root roots; default: the "
                      "directory the agent was started in."),
]
TrustUnsigned = Annotated[
    bool,
    typer.Option("--trust-unsigned",
                 help="Also act on unsigned commands (a controller started with --unsigned). "
                      "A command signed by anything but a registered controller key is refused "
                      "either way."),
]
NodeKeyFile = Annotated[
    Path | None,
    typer.Option("--node-key", metavar="FILE",
                 help="This node's key file (`runledger node enroll`), which signs every "
                      "report. Default: on the local stack, the agent enrolls itself "
                      "(<data dir>/keys/node.NODE.key)."),
]
WorkerCredentials = Annotated[
    Path | None,
    typer.Option("--worker-credentials", metavar="FILE",
                 help="The Kafka credentials its workers get (role worker: write reports, read "
                      "runs), never the agent's own. Default: worker.properties beside the "
                      "agent's RUNLEDGER_CREDENTIALS file."),
]
LogCap = Annotated[
    str,
    typer.Option("--log-cap", metavar="SIZE", envvar=LOG_CAP_ENV,
                 help="Each worker's log file is rotated at this size (bytes, or with K, M, "
                      "G, KiB, MiB, GiB: binary units; at least 64KiB): a worker's output "
                      "takes at most (--log-keep + 1) x SIZE on disk, the oldest dropped."),
]
LogKeep = Annotated[
    int,
    typer.Option("--log-keep", metavar="N", min=1, envvar=LOG_KEEP_ENV,
                 help="Rotated files kept per worker log (<log>.1 .. <log>.N) besides the "
                      "current one."),
]


def register(app: typer.Typer) -> None:
    app.command()(agent)


def agent(
    node: Node,
    slots: Slots,
    domain: Domain = "default",
    address: Address = "127.0.0.1",
    bootstrap: Bootstrap = None,
    heartbeat_interval: HeartbeatInterval = 2.0,
    work_dir: WorkDir = None,
    grace: Grace = 5.0,
    max_start_age: MaxStartAge = 300.0,
    slot_wait: SlotWait = 15.0,
    allow_root: AllowRoot = None,
    trust_unsigned: TrustUnsigned = False,
    allow: Allow = None,
    allow_workdir: AllowWorkdir = None,
    node_key: NodeKeyFile = None,
    worker_credentials: WorkerCredentials = None,
    log_cap: LogCap = "64MiB",
    log_keep: LogKeep = DEFAULT_KEEP,
    metrics_address: MetricsAddress = None,
) -> None:
    """Run a node agent: register slots, heartbeat, launch and stop worker groups on command.

    Stops its workers and exits 0 on SIGTERM or Ctrl-C.
    """
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kafka = config.connect(bootstrap, role="agent")
    agent_config = AgentConfig(node=node, slots=slots, bootstrap=kafka,
                               heartbeat_interval_s=heartbeat_interval,
                               max_start_age_ms=int(max_start_age * 1000),
                               slot_wait_ms=int(slot_wait * 1000),
                               allowed_roots=tuple(allow_root or default_roots()),
                               allowed_executables=tuple(allow or ()),
                               allowed_workdirs=tuple(allow_workdir
                                                      or _spellings(Path.cwd())))
    options = AgentOptions(domain=domain, address=address,
                           work_dir=work_dir or config.agent_work_dir(node), grace_s=grace,
                           trust_unsigned=trust_unsigned,
                           worker_env=worker_environ(worker_credentials),
                           log_cap=parse_size(log_cap, "--log-cap"), log_keep=log_keep)
    node_agent = Agent(agent_config, options)  # its options are checked first
    key = nodekeys.agent_key(kafka, node, node_key, bootstrap)
    node_agent.options = replace(options, node_key=key)
    server: MetricsServer | None = None
    try:
        if metrics_address is not None:
            server = serve_metrics(AgentCollector(node_agent), metrics_address)
        code = node_agent.run()
    finally:
        if server is not None:
            server.close()
    raise typer.Exit(code)


def parse_size(text: str, option: str) -> int:
    """``64MiB``, ``512k``, ``1048576``: a size in bytes (K, M, G are binary units)."""
    spelled = text.strip().lower().replace(" ", "")
    digits = spelled.rstrip("kmgib")
    unit = spelled[len(digits):]
    try:
        value = float(digits)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value < 0:
        raise UsageError(f"{option} {text!r} is not a size: say bytes, or a number with K, M"
                         " or G (KiB, MiB, GiB), e.g. 64MiB")
    return int(value * _UNITS[unit])


def worker_environ(explicit: Path | None) -> dict[str, str] | None:
    """The environment workers start from: the agent's, with the worker's credentials file
    in place of the agent's (None: the agent's own, on a cluster without credentials)."""
    own = os.environ.get(ENV_CREDENTIALS)
    if explicit is None and not own:
        return None  # a plaintext cluster: nobody has credentials
    path = explicit or Path(own or "").parent / WORKER_CREDENTIALS
    if not path.is_file():
        raise UsageError(
            f"no worker credentials at {path}: an agent never hands its workers its own "
            f"credentials; make a worker principal (runledger principal add NAME --role "
            f"worker, as the admin) and pass its file with --worker-credentials, or put it "
            f"there ({WORKER_CREDENTIALS} beside the agent's RUNLEDGER_CREDENTIALS)")
    return {**os.environ, ENV_CREDENTIALS: str(path.absolute())}


def default_roots() -> list[str]:
    """Where checkpoints may go when no ``--allow-root`` is given: runledger's own places."""
    places = [config.home()]
    env_root = os.environ.get(CHECKPOINT_ROOT)
    if env_root and "://" in env_root:
        return [*_spellings(places[0]), env_root]
    if env_root:
        places.append(Path(env_root))
    # Paths are compared as text: allow each place as written and with links resolved.
    return [s for p in places for s in _spellings(p)]


def _spellings(path: Path) -> list[str]:
    return sorted({str(path.expanduser().absolute()), str(path.expanduser().resolve())})

"""``runledger controller``: run the reconcile loop until stopped or fenced.

With ``--metrics HOST:PORT`` the run model is also served at
``http://HOST:PORT/metrics`` for Prometheus (``controller.metrics``).

Every fact and command is signed with the controller's Ed25519 key,
``--signing-key FILE`` or ``$RUNLEDGER_SIGNING_KEY``, else, against the
remembered local stack, the ``<data dir>/keys/controller.key`` it wrote (with
its ``controller.properties`` when ``RUNLEDGER_CREDENTIALS`` is unset). Without
one the controller refuses to start, unless ``--unsigned`` says to append them
unsigned.

Operator requests (submit, cancel, resume, node operations, gate evidence) are
believed only when signed by a registered operator key
(``controller.signatures``); ``--trust-unsigned`` takes unsigned ones on the
broker's word instead, with a warning at start and the
``runledger_controller_trusts_unsigned`` gauge set. ``--require-signatures``,
from when signing was opt-in, is accepted and changes nothing.

``--quarantine-expiry-s`` (default 3600) and ``--probation-failures``
(default 2) are the node quarantine policy (``controller.model.NodePolicy``).

``--allow-root DIR`` (repeatable) names where the controller may write a run's
``run-manifest.json``; a spec whose checkpoint root lies elsewhere is refused
(``controller.roots``). Default: the agent's default roots, ``$RUNLEDGER_HOME``
and ``$RUNLEDGER_CHECKPOINT_ROOT``.

Tested in tests/controller/test_metrics.py, tests/e2e/test_controller.py and
tests/runledger/commands/test_controller.py.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from cryptography.exceptions import UnsupportedAlgorithm

from controller.metrics import ControllerCollector
from controller.model import NodePolicy
from controller.roots import within
from controller.runplan import plan_from_submission
from controller.service import (
    DEFAULT_GROUP,
    DEFAULT_TRANSACTION_TIMEOUT_S,
    DEFAULT_TRANSACTIONAL_ID,
    ENV_SIGNING_KEY,
    FENCED_EXIT,
    ControllerService,
)
from events.names import path_problem
from events.signed.signing import SigningKey
from runledger import config
from runledger.commands.agent import default_roots
from runledger.config import Bootstrap, MetricsAddress
from runledger.errors import ControllerFenced, UsageError
from runledger.metricsserver import MetricsServer, serve_metrics

log = logging.getLogger("runledger.controller")
MAX_NODE_SILENCE_S = 600.0  # ten minutes: past that a lost node is an outage, not a wait

TransactionalId = Annotated[
    str, typer.Option(help="Fencing identity: a second controller with it fences the first; "
                           "controllers with different ids share the runs (one owner each).")
]
Group = Annotated[str, typer.Option(help="Consumer group for requests and reports.")]
Tick = Annotated[float, typer.Option(help="Seconds between reconcile ticks.")]
TransactionTimeout = Annotated[float, typer.Option(
    help="Seconds a transaction may stay open before the broker aborts it: how long a "
         "killed controller's last transaction can hold back the next owner of its runs.")]
SigningKeyFile = Annotated[Path | None, typer.Option(
    "--signing-key", metavar="FILE",
    help=f"The controller's Ed25519 key, PEM (default ${ENV_SIGNING_KEY}, else the local "
         "stack's keys/controller.key): it signs every fact and command.")]
Unsigned = Annotated[bool, typer.Option(
    "--unsigned", help="Append facts and commands unsigned, without a key (an audit "
                       "reports every one of them).")]


TrustUnsigned = Annotated[bool, typer.Option(
    "--trust-unsigned",
    help="Take unsigned submit, cancel, resume, node and gate requests on the broker's word "
         "(it vouches only for the role: any operator may name any principal); logged as a "
         "warning. Default: refuse them (WriteRejected `unsigned`). A badly signed request "
         "is refused either way.")]
# Signed requests were opt-in before they became the default; the old flag still parses
# so scripts that pass it keep working, and it changes nothing.
RequireSignatures = Annotated[bool, typer.Option(
    "--require-signatures", hidden=True,
    help="The default now; accepted and ignored. Contradicts --trust-unsigned.")]


QuarantineExpiry = Annotated[float, typer.Option(
    "--quarantine-expiry-s",
    help="Seconds a node quarantine lasts before it expires (NodeQuarantineExpired) and the "
         "node takes work again on probation; 0: until `runledger node uncordon`.")]
Probation = Annotated[int, typer.Option(
    "--probation-failures",
    help="Failures a node whose quarantine expired starts with: 2 (one short of a "
         "quarantine) means its next node fault quarantines it again.")]


NodeSilence = Annotated[float, typer.Option(
    "--node-silence-s",
    help="Seconds a node's agent and workers may all be silent before the node counts as "
         "lost (NodeLost); at least three of the agents' --heartbeat-interval. Raise both "
         "for a fleet too large for every agent to report every 2 s (docs/performance.md).")]


AllowRoot = Annotated[list[str] | None, typer.Option(
    "--allow-root", metavar="DIR",
    help="A directory or fsspec URL under which the controller may write (a run's "
         "run-manifest.json, under its checkpoint root) (repeatable); a spec whose "
         "checkpoint root lies elsewhere is refused. Default: $RUNLEDGER_HOME and "
         "$RUNLEDGER_CHECKPOINT_ROOT.")]


def _node_policy(quarantine_expiry_s: float, probation_failures: int,
                 node_silence_s: float) -> NodePolicy:
    """The node options as the controller's config, or the usage error naming one."""
    if quarantine_expiry_s < 0 or probation_failures < 0:
        raise UsageError("--quarantine-expiry-s and --probation-failures must be >= 0 "
                         f"(got {quarantine_expiry_s} and {probation_failures})")
    if not 1.0 <= node_silence_s <= MAX_NODE_SILENCE_S:
        raise UsageError(f"--node-silence-s must be 1 to {MAX_NODE_SILENCE_S:g} seconds "
                         f"(got {node_silence_s:g}): three of the agents' heartbeat intervals")
    return NodePolicy(int(quarantine_expiry_s * 1000), probation_failures,
                      silence_ms=int(node_silence_s * 1000))


def register(app: typer.Typer) -> None:
    app.command()(controller)


def controller(
    bootstrap: Bootstrap = None,
    transactional_id: TransactionalId = DEFAULT_TRANSACTIONAL_ID,
    group: Group = DEFAULT_GROUP,
    tick: Tick = 0.25,
    metrics_address: MetricsAddress = None,
    transaction_timeout: TransactionTimeout = DEFAULT_TRANSACTION_TIMEOUT_S,
    signing_key: SigningKeyFile = None,
    unsigned: Unsigned = False,
    trust_unsigned: TrustUnsigned = False,
    require_signatures: RequireSignatures = False,
    quarantine_expiry_s: QuarantineExpiry = 3600.0,
    probation_failures: Probation = 2,
    node_silence_s: NodeSilence = 6.0,
    allow_root: AllowRoot = None,
) -> None:
    """Fold the log, reconcile runs with what agents report, append signed facts and commands."""
    if trust_unsigned and require_signatures:
        raise UsageError("--trust-unsigned and --require-signatures contradict each other: "
                         "drop --require-signatures (signed requests are the default)")
    # The options first: a mistyped number is said before a missing key is looked for.
    node_policy = _node_policy(quarantine_expiry_s, probation_failures, node_silence_s)
    key = load_signing_key(signing_key, unsigned, config.stack_signing_key(bootstrap))
    roots = allowed_roots(allow_root)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("the controller writes only under %s (--allow-root)", ", ".join(roots))
    service = ControllerService(
        config.bootstrap(bootstrap, role="controller"),
        within(plan_from_submission, roots),
        allowed_roots=roots,
        transactional_id=transactional_id,
        group_id=group,
        tick_s=tick,
        transaction_timeout_s=transaction_timeout,
        signing_key=key,
        require_signatures=not trust_unsigned,
        node_policy=node_policy,
    )
    server: MetricsServer | None = None
    try:
        if metrics_address is not None:
            server = serve_metrics(ControllerCollector(service), metrics_address)
        code = service.run(stop)
    finally:
        if server is not None:
            server.close()
    if code == FENCED_EXIT:
        raise ControllerFenced(
            f"controller fenced: another controller with transactional id "
            f"{transactional_id!r} took over; this one stopped without writing more")
    raise typer.Exit(code)


def allowed_roots(given: list[str] | None) -> tuple[str, ...]:
    """The controller's roots: ``--allow-root``'s, each an absolute path or a URL with no
    ``..``, else the agent's defaults (``runledger.commands.agent.default_roots``)."""
    if not given:
        return tuple(default_roots())
    problems = [path_problem(r, f"--allow-root {r!r}") or (
        None if r.startswith("/") or "://" in r
        else f"--allow-root {r!r} must be an absolute path or a URL") for r in given]
    if any(problems):
        raise UsageError("; ".join(p for p in problems if p))
    return tuple(given)


def load_signing_key(path: Path | None, unsigned: bool,
                     stack_key: Path | None = None) -> SigningKey | None:
    """The key named by ``--signing-key`` or the environment, else ``stack_key`` (the
    remembered local stack's); None with ``--unsigned``.

    An explicit ``--unsigned`` wins over the environment's key; with
    ``--signing-key`` it is a contradiction.
    """
    if unsigned:
        if path is not None:
            raise UsageError("--signing-key and --unsigned contradict each other: pass one")
        return None
    named = path or (Path(os.environ[ENV_SIGNING_KEY]) if os.environ.get(ENV_SIGNING_KEY)
                     else stack_key)
    if named is None:
        raise UsageError(f"no signing key: pass --signing-key FILE (or set {ENV_SIGNING_KEY}; a "
                         "secure local stack's own key is used when --bootstrap and "
                         "RUNLEDGER_BOOTSTRAP are unset) "
                         "with the controller's key, or --unsigned to append facts and "
                         "commands unsigned")
    try:
        return SigningKey.load(named)
    except FileNotFoundError:
        raise UsageError(f"signing key {named}: no such file; pass the controller's key file "
                         "(a local stack writes <data dir>/keys/controller.key)") from None
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"signing key {named}: not an unencrypted Ed25519 PEM key ({why}); "
                         "pass the file the controller's key was saved to") from None

"""Every top-level command in one table, in the order a user meets them, and the root help.

The console script answers ``--help`` from here with nothing else loaded
(``runledger.cli``), and the Typer app loads a command's module by it
(``runledger.app``). Standard library only.

Tested in tests/runledger/test_cli_imports.py.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass

PROG = "runledger"
ABOUT = "Operate event-sourced distributed training runs over Apache Kafka."


@dataclass(frozen=True, slots=True)
class Command:
    """One top-level command: its name, the module whose ``register`` adds it, and the
    first paragraph of its help (tests/runledger/test_cli.py checks they agree)."""

    name: str
    module: str
    summary: str


def _c(name: str, module: str, summary: str) -> Command:
    return Command(name, f"runledger.commands.{module}", summary)


# The order a user meets them: try it, set up, run, look, plan, operate, afterwards.
SECTIONS: tuple[tuple[str, tuple[Command, ...]], ...] = (
    ("Try it", (
        _c("demo", "demo", "Run the whole system on this machine: a broker, a controller, a "
           "projector and an agent as processes, a 2-process torch run with a worker killed "
           "between checkpoints, its recovery and success, then status, ETTR, provenance, "
           "incidents and the report."),
    )),
    ("Set up a stack", (
        _c("stack", "stack", "A local Apache Kafka (KRaft) cluster. Without --data-dir, "
           "RUNLEDGER_BOOTSTRAP points up (topics only) and status at an existing cluster "
           "instead."),
        _c("controller", "controller", "Fold the log, reconcile runs with what agents report, "
           "append signed facts and commands."),
        _c("agent", "agent", "Run a node agent: register slots, heartbeat, launch and stop "
           "worker groups on command."),
        _c("project", "project", "Project runledger.runs and runledger.reports into DuckDB, "
           "resuming after the offsets stored with the last applied batch."),
        _c("dataset", "dataset", "Dataset manifests: build them from templates, store them by "
           "id in a catalog ($RUNLEDGER_DATASETS or $RUNLEDGER_HOME/datasets), name them with "
           "aliases."),
    )),
    ("Run a job", (
        _c("submit", "runs", "Validate a run spec and request the run; print its run id."),
        _c("status", "runs", "A run's state: generation, members, progress, checkpoint, "
           "failures."),
        _c("runs", "runs", "Runs: id, name, principal, state, generation, submitted at; oldest "
           "first."),
        _c("logs", "logs", "Print a worker's output: its log file, running or exited; --follow "
           "tails it."),
        _c("ui", "ui", "Serve a live, read-only web view: runs, a run's progress, curves, "
           "failures and recovery, nodes, and a worker's output, updated every few seconds."),
        _c("cancel", "runs", "Ask the controller to cancel a run."),
        _c("resume", "runs", "Ask the controller to resume a run that an alert's pause action "
           "paused."),
    )),
    ("Understand a run", (
        _c("report", "report", "Write a run's postmortem as one HTML file: timeline, ETTR, "
           "incidents, provenance."),
        _c("query", "query", "Answer a question about a run from the DuckDB projection "
           "(`runledger project`); `manifest`: the post-run manifest, rebuilt from the log and "
           "checked against its file."),
        _c("checkpoint", "checkpoint", "A run's checkpoints: what the log committed; "
           "collection."),
        _c("events", "events", "Read the log: decoded events as JSON lines (type, offset, "
           "header, payload, verdict)."),
        _c("replay", "project", "Rebuild a projection from offset 0 into a new database file, "
           "up to the log's end."),
    )),
    ("Plan a run", (
        _c("preflight", "preflight", "Check the nodes, storage, data and topics a spec would "
           "use; record the result."),
        _c("pilot", "pilot", "Run the spec small and short on the live stack; record step "
           "time, checkpoint cost and restore time."),
        _c("drill", "drill", "Inject each fault into its own small run of the spec and check "
           "what followed."),
        _c("interval", "interval", "Young's checkpoint interval T = sqrt(2*C*M) and the "
           "expected waste around it."),
    )),
    ("Operate nodes", (
        _c("nodes", "nodes", "Every node: slots, domain, heartbeat age, failures counted "
           "against it, state (ready, cordoned, draining, quarantined, lost), why and since "
           "when, when a quarantine expires, and a probation after one."),
        _c("node", "nodes", "Cordon, drain or free a node (signed operator requests); enroll "
           "one (its key)."),
    )),
    ("Security and audit", (
        _c("key", "keys", "Signing keys: create, register, revoke, list (runledger.keys)."),
        _c("principal", "security", "Kafka principals (SCRAM-SHA-512 users)."),
        _c("acl", "security", "The roles' ACLs."),
        _c("audit", "audit", "Verify the signed log: the key ring and each run's chain."),
    )),
)
COMMANDS: dict[str, Command] = {c.name: c for _, group in SECTIONS for c in group}


def version() -> str:
    """The installed version (pyproject.toml's, kept in ``runledger.__version__``)."""
    from runledger import __version__

    return __version__


def root_help(width: int | None = None) -> str:
    """What ``runledger --help`` prints: usage, the commands by section, the options."""
    width = max(60, min(width or _columns(), 100))
    name_w = max(len(n) for n in COMMANDS) + 2
    lines = [f"Usage: {PROG} COMMAND [ARGS]...", "", *textwrap.wrap(ABOUT, width), ""]
    for title, group in SECTIONS:
        lines.append(f"{title}:")
        for c in group:
            body = textwrap.wrap(c.summary, width - 2 - name_w) or [""]
            lines.append(f"  {c.name.ljust(name_w)}{body[0]}")
            lines.extend(" " * (2 + name_w) + more for more in body[1:])
        lines.append("")
    lines += ["Options:",
              f"  {'--version'.ljust(name_w)}Print runledger's version and exit.",
              f"  {'--help'.ljust(name_w)}Show this message and exit.",
              "",
              *textwrap.wrap(f"`{PROG} COMMAND --help` says what a command takes.", width),
              ""]
    return "\n".join(lines)


def _columns() -> int:
    try:
        return int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
    except (ValueError, OSError):
        return 80

"""``runledger demo``: the command line of :mod:`runledger.demo`.

Progress goes to stdout, or to stderr with ``--json`` so that stdout holds only
the summary object. Exit status: 0 when the run succeeded through at least one
recovery and every query worked, 1 when anything did not happen (the message
says what and which log to read), 130 on Ctrl-C or SIGTERM, after every process
the demo started has been stopped.

Tested in tests/e2e/test_demo.py.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from runledger.demo.run import run_demo
from runledger.demo.setup import DemoOptions

_D = DemoOptions()

Workdir = Annotated[Path | None, typer.Option(
    "--work-dir", help="A new or empty directory for everything the demo writes (default:"
                       " a fresh temporary directory).")]
# The old spelling, kept working but out of --help: one spelling, as `agent --work-dir`.
OldWorkdir = Annotated[Path | None, typer.Option("--workdir", hidden=True)]
DemoBootstrap = Annotated[str | None, typer.Option(
    "--bootstrap", envvar="RUNLEDGER_BOOTSTRAP",
    help="Use this Kafka cluster (default $RUNLEDGER_BOOTSTRAP) instead of starting a"
         " broker in the workdir; it should run no other controller.")]
Steps = Annotated[int, typer.Option("--steps", help="Training steps of the run.")]
Interval = Annotated[int, typer.Option("--interval", help="Checkpoint every this many steps.")]
KillStep = Annotated[int, typer.Option(
    "--kill-step", help="Rank 1 of generation 1 is SIGKILLed after this step (between two"
                        " checkpoints).")]
StepSleep = Annotated[float, typer.Option(
    "--step-sleep", help="Seconds each step pauses, so the run is long enough to watch.")]
Timeout = Annotated[float, typer.Option("--timeout", help="Seconds the whole run may take.")]
StallTimeout = Annotated[float, typer.Option(
    "--stall-timeout", help="Seconds without any progress before the demo gives up and"
                            " names what did not happen.")]
Queries = Annotated[bool, typer.Option(
    "--queries/--no-queries", help="Run the ETTR, provenance and incidents queries and"
                                   " write the HTML report at the end.")]
KeepStack = Annotated[bool, typer.Option(
    "--keep-stack", help="Leave the broker the demo started running, for inspection.")]
UiPort = Annotated[int, typer.Option(
    "--ui-port", metavar="P", help="Port of the live view (runledger ui) the demo starts; when"
    " it is taken, any free one (the demo prints the URL).")]
SummaryJson = Annotated[bool, typer.Option(
    "--json", help="Print the summary as JSON on stdout (progress goes to stderr).")]
SummaryFile = Annotated[Path | None, typer.Option(
    "--summary", help="Also write the JSON summary to this file.")]


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    workdir: Workdir = None,
    bootstrap: DemoBootstrap = None,
    steps: Steps = _D.steps,
    interval: Interval = _D.interval,
    kill_step: KillStep = _D.kill_step,
    step_sleep: StepSleep = _D.step_sleep_s,
    timeout: Timeout = _D.timeout_s,
    stall_timeout: StallTimeout = _D.stall_s,
    queries: Queries = True,
    keep_stack: KeepStack = False,
    ui_port: UiPort = _D.ui_port,
    as_json: SummaryJson = False,
    summary_file: SummaryFile = None,
    old_workdir: OldWorkdir = None,
) -> None:
    """Run the whole system on this machine: a broker, a controller, a projector and an
    agent as processes, a 2-process torch run with a worker killed between checkpoints,
    its recovery and success, then status, ETTR, provenance, incidents and the report."""
    opts = DemoOptions(workdir=workdir or old_workdir, bootstrap=bootstrap or None, steps=steps,
                       interval=interval, kill_step=kill_step, step_sleep_s=step_sleep,
                       timeout_s=timeout, stall_s=stall_timeout, queries=queries,
                       keep_stack=keep_stack, ui_port=ui_port)

    def say(line: str) -> None:
        typer.echo(line, err=as_json)

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # the same clean-up as Ctrl-C

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        summary = run_demo(opts, say)
    finally:
        signal.signal(signal.SIGTERM, previous)
    text = json.dumps(summary.to_json(), indent=2)
    if summary_file is not None:
        summary_file.write_text(text + "\n", encoding="utf-8")
    if as_json:
        typer.echo(text)
    raise typer.Exit(0 if summary.ok else 1)

"""``runledger logs RUN``: print a worker's output (stdout and stderr) from its log file.

The log is found through the run's facts (``runledger.logview``): the agent
names the file in the worker's exit report. It is read when this machine can
reach it (the same host, or a shared filesystem); otherwise the command says
on which node and at which path it is. ``--follow`` waits for a member that
has not exited yet to name its log, then prints it.

Tested in tests/e2e/test_jobs.py and tests/runledger/test_logview.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from events.consume import read_log
from events.model import Event
from events.topics import RUNS
from runledger import config
from runledger.config import Bootstrap, RunArg
from runledger.errors import RunledgerError
from runledger.logview import LogNotFound, Picked, pick

Rank = Annotated[str | None, typer.Option(
    "--rank", metavar="R", help="A rank number or logical id (default: the first that failed,"
                                " else rank 0).")]
Generation = Annotated[int | None, typer.Option(
    "--generation", metavar="G", help="The generation (default: the newest with an exit).")]
Follow = Annotated[bool, typer.Option(
    "--follow", help="Wait until the worker has exited and named its log, then print it.")]


def register(app: typer.Typer) -> None:
    app.command()(logs)


def logs(run: RunArg, rank: Rank = None, generation: Generation = None, follow: Follow = False,
         bootstrap: Bootstrap = None) -> None:
    """Print a worker's output: its log file, as its agent named it in the exit report."""
    address = config.connect(bootstrap)
    while True:
        facts = _facts(address, run)
        if not facts:
            raise RunledgerError(f"unknown run {run!r}: not on {RUNS}"
                                 " (`runledger runs` lists the runs)")
        try:
            picked = pick(run, facts, rank, generation)
        except LogNotFound as exc:
            raise RunledgerError(str(exc)) from None
        if picked.exited is not None or not follow:
            break
        time.sleep(1.0)
    _print(run, picked)


def _print(run: str, picked: Picked) -> None:
    who = f"rank {picked.rank} ({picked.logical_id})" if picked.rank is not None else \
        picked.logical_id
    if picked.exited is None:
        raise RunledgerError(f"{who} of {run} generation {picked.generation} has not exited, so"
                             " no log is named yet; --follow waits for it")
    if not picked.log_path:
        raise RunledgerError(f"{who} of {run} generation {picked.generation} has no log: its"
                             " agent predates log reports, or refused the launch")
    path = Path(picked.log_path)
    if not path.is_file():
        raise RunledgerError(f"the log of {who} is on node {picked.node} at {picked.log_path},"
                             " which this machine cannot read")
    typer.echo(f"==> {picked.log_path} (node {picked.node}, {who}, generation"
               f" {picked.generation}) <==", err=True)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            typer.echo(chunk.decode("utf-8", errors="replace"), nl=False)


def _facts(address: str, run: str) -> list[Event]:
    records = read_log(address, RUNS, retry_s=config.retry_s())
    return [r.event for r in records if r.event.run_id == run]

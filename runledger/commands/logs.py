"""``runledger logs RUN``: print a worker's output (stdout and stderr) from its log file.

The member and its file are found through the run's facts and its node's
registration (``runledger.views.logview``): an exited worker's file is the one its
agent named in the exit report; a running worker's lies under the work dir its
agent registered. The file is read when this machine can reach it (the same
host, or a shared filesystem); otherwise the command says on which node and at
which path it is. Without ``--follow`` it prints what the file holds now;
with it, it goes on printing what is appended, as ``tail -f`` does, until the
worker's ``WorkerExited`` is on the log, then prints the rest and ends.
``--tail N`` starts at the file's last N lines (read backwards from its end,
so a chatty worker's 20 MB file costs only those lines).

The agent rotates a worker's log at its cap (``agent.logrelay``): the command
reads ``<log>.N`` .. ``<log>.1`` and then ``<log>`` as one output, the newest
last (``agent.logfiles.LogStream``; ``--tail`` counts its lines across them, and
``--follow`` goes on into the new file when the agent rotates the one it reads),
and says on stderr when older output was dropped by the cap.

Only the run's partition of ``runledger.runs`` and the node's of
``runledger.reports`` are read (``LogReader`` ``key_partition``).

Tested in tests/e2e/test_jobs.py and tests/runledger/views/test_logview.py.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Annotated

import typer

from agent.logfiles import LogStream, dropped
from events.kafka.reader import LogReader
from events.model import Event
from runledger import config
from runledger.config import AsJson, Bootstrap, RunArg
from runledger.errors import RunledgerError, UsageError
from runledger.interrupt import follow_ctrl_c
from runledger.logfind import locate, run_facts, run_reader
from runledger.views.logview import Picked, describe, exit_of

Rank = Annotated[str | None, typer.Option(
    "--rank", metavar="R", help="A rank number or logical id (default: the first that failed,"
                                " else rank 0).")]
Generation = Annotated[int | None, typer.Option(
    "--generation", metavar="G", help="The generation (default: the newest).")]
Follow = Annotated[bool, typer.Option(
    "--follow", "-f", help="Go on printing what the worker writes until it has exited.")]
Tail = Annotated[int | None, typer.Option(
    "--tail", "-n", metavar="N", min=0,
    help="Only the last N lines (with --follow: then what is appended).")]

# How long one wait for new facts lasts while the file has nothing new: the
# pace at which a followed file is read again.
POLL_S = 0.5
CHUNK = 1 << 16


def register(app: typer.Typer) -> None:
    app.command()(logs)


def logs(run: RunArg, rank: Rank = None, generation: Generation = None, follow: Follow = False,
         tail: Tail = None, as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Print a worker's output: its log file, running or exited; --follow tails it."""
    if as_json and follow:
        raise UsageError("--json prints the log as it is now, in one object; it cannot "
                         "--follow (drop one of them)")
    address = config.connect(bootstrap)
    # Bounded (a dump) unless following: then the same reader goes on to watch for the exit.
    reader = run_reader(address, run, bounded=not follow, retry_s=config.retry_s())
    try:
        facts = run_facts(reader, run)
        picked, path, work_dir = locate(address, run, facts, rank, generation,
                                        config.retry_s())
        if picked.live and follow:
            follow_ctrl_c()
            _follow(reader, run, picked, path, work_dir or "", tail)
        elif as_json:
            _print_json(run, picked, path, tail)
        else:
            _print_now(run, picked, path, tail)
    finally:
        reader.close()


def _print_now(run: str, picked: Picked, path: Path, tail: int | None) -> None:
    with LogStream(path, tail) as stream:
        if not stream.paths:
            raise _unreachable(picked, path)
        _banner(run, picked, path, tail, stream)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        _copy(stream, decoder)
    typer.echo(decoder.decode(b"", final=True), nl=False)


def _print_json(run: str, picked: Picked, path: Path, tail: int | None) -> None:
    with LogStream(path, tail) as stream:
        if not stream.paths:
            raise _unreachable(picked, path)
        text = b"".join(iter(lambda: stream.read(CHUNK), b"")).decode("utf-8",
                                                                        errors="replace")
    ex = picked.exited
    cut = dropped(path)
    typer.echo(json.dumps({
        "run_id": run, "generation": picked.generation, "logical_id": picked.logical_id,
        "rank": picked.rank, "node": picked.node, "path": str(path),
        "files": [str(p) for p in stream.paths],
        "dropped_bytes": cut.bytes if cut is not None else 0,
        "state": "exited" if ex is not None else "running" if picked.live else "stopped",
        "exit_code": None if ex is None else ex.exit_code,
        "signal": None if ex is None else ex.signal, "tail": tail, "text": text}))


def _follow(reader: LogReader, run: str, picked: Picked, path: Path, work_dir: str,
            tail: int | None) -> None:
    """Print the log and what is appended to it until the worker's exit is on the log;
    across the agent's rotations of the file."""
    if not Path(work_dir).is_dir():
        raise _unreachable(picked, path)
    exited = False
    while not path.is_file():  # the agent opens it as it launches the worker
        if exited:
            raise _unreachable(picked, path)
        exited = _exited(reader, run, picked)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with LogStream(path, tail, follow=True) as stream:
        _banner(run, picked, path, tail, stream)
        while True:
            if _copy(stream, decoder):
                continue
            if exited:  # the worker had ended before this read: that was the rest
                break
            exited = _exited(reader, run, picked)
        typer.echo(decoder.decode(b"", final=True), nl=False)


def _exited(reader: LogReader, run: str, picked: Picked) -> bool:
    """Whether the member's exit came among the facts read now (waits up to POLL_S)."""
    news: list[Event] = [r.event for r in reader.read_records(500, POLL_S)
                         if r.event.run_id == run]
    return exit_of(picked, news) is not None


def _copy(f: LogStream, decoder: codecs.IncrementalDecoder) -> bool:
    """Print what ``f`` holds from where it stands; whether there was anything."""
    any_read = False
    for chunk in iter(lambda: f.read(CHUNK), b""):
        any_read = True
        typer.echo(decoder.decode(chunk), nl=False)
    return any_read


def _banner(run: str, picked: Picked, path: Path, tail: int | None,
            stream: LogStream) -> None:
    # Running only while it may be: a member of an older generation, or of a run that
    # ended, without an exit on the log was stopped with its group.
    state = ("" if picked.exited is not None else ", running" if picked.live
             else ", stopped with its group")
    state += f", its last {tail} lines" if tail is not None else ""
    files = len(stream.paths)
    state += f", its output in {files} files (rotated at its cap)" if files > 1 else ""
    typer.echo(f"==> {path} (node {picked.node}, {describe(picked)} of {run}, generation"
               f" {picked.generation}{state}) <==", err=True)
    cut = dropped(path)
    if cut is not None and stream.from_oldest:
        typer.echo(f"==> {cut}: what follows starts later <==", err=True)


def _unreachable(picked: Picked, path: Path) -> RunledgerError:
    return RunledgerError(f"the log of {describe(picked)} is on node {picked.node} at {path},"
                          " which this machine cannot read")

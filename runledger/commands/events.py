"""``runledger events tail|dump``: the log as decoded JSON lines, with the fold's verdict.

The verdict is what ``events.fold`` says of each event, folding the topic's
records per run in offset order; events of runs whose ``RunSubmitted`` is not
on the topic being read get no verdict rather than a misleading one.
``runledger.status`` holds derived summaries, not events: ``dump`` prints the
newest summary of each run (``events.kafka.statuslog``) and ``tail`` refuses it.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from events.convert import to_record
from events.errors import DecodeError
from events.fold import UNKNOWN_RUN, apply
from events.kafka.consume import read_log
from events.kafka.statuslog import read_status
from events.record import Quarantined, Record
from events.state import RunState
from events.topics import ALL, RUNS, STATUS
from runledger import config
from runledger.config import Bootstrap, json_option
from runledger.errors import UsageError
from runledger.interrupt import follow_ctrl_c
from runledger.views import statusview

Topic = Annotated[str, typer.Option("--topic", "-t", help=f"One of: {', '.join(ALL)}.")]
Run = Annotated[str | None, typer.Option("--run", help="Only this run id.")]
JsonLines = Annotated[bool, json_option("One JSON object per line.")]


def register(app: typer.Typer) -> None:
    events_app = typer.Typer(
        help="Read the log: decoded events as JSON lines (type, offset, header, payload,"
             " verdict).",
        no_args_is_help=True,
    )
    events_app.command()(dump)
    events_app.command()(tail)
    app.add_typer(events_app, name="events")


def record_document(record: Record, verdict: dict[str, Any] | None) -> dict[str, Any]:
    body = to_record(record.event)
    header = body.pop("header")
    doc: dict[str, Any] = {
        "type": record.event.event_type,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "writer_version": record.writer_version,
        "header": header,
        # Bytes (a key record's public key) as hex: JSON has no bytes.
        "payload": {k: v.hex() if isinstance(v, bytes) else v for k, v in body.items()},
    }
    if record.origin:
        doc["quarantined"] = dict(record.origin)  # where it came from and why it is here
    if verdict is not None:
        doc["verdict"] = verdict
    return doc


class VerdictTracker:
    """Folds what it is shown, per run, and says what the fold made of each event."""

    def __init__(self) -> None:
        self.states: dict[str, RunState] = {}

    def judge(self, record: Record) -> dict[str, Any] | None:
        event = record.event
        transition = apply(self.states.get(event.run_id), event)
        if transition.state is not None:
            self.states[event.run_id] = transition.state
        v = transition.verdict
        if not v.accepted and v.reason == UNKNOWN_RUN:
            return None
        if v.accepted:
            return {"accepted": True}
        return {"accepted": False, "reason": v.reason, "detail": v.detail}


def _human(doc: dict[str, Any]) -> str:
    h = doc["header"]
    payload = " ".join(f"{k}={v}" for k, v in doc["payload"].items())
    verdict = doc.get("verdict")
    mark = ""
    if verdict is not None:
        mark = "  [ok]" if verdict["accepted"] else f"  [REJECTED {verdict['reason']}]"
    kept = doc.get("quarantined")
    if kept:
        mark += (f"  [QUARANTINED {kept.get('reason', '?')} from {kept.get('origin_topic', '?')}"
                 f"[{kept.get('origin_partition', '?')}]@{kept.get('origin_offset', '?')}:"
                 f" {kept.get('detail', '')}]")
    return (
        f"{doc['partition']}:{doc['offset']:<6} {doc['type']:<20} run={h['run_id']} "
        f"gen={h['generation']} {payload}{mark}"
    )


def _stream(
    topic: str, run: str | None, as_json: bool, bootstrap: str | None, follow: bool
) -> None:
    if topic not in ALL:
        raise UsageError(f"unknown topic {topic!r}; one of {', '.join(ALL)}")

    def report(q: Quarantined) -> None:
        if run is not None and q.key != run:
            return
        if as_json:
            typer.echo(json.dumps({"type": "Undecodable", "topic": q.topic,
                                   "partition": q.partition, "offset": q.offset,
                                   "key": q.key, "reason": q.reason, "detail": q.detail}))
        typer.echo(f"runledger: {q}", err=True)

    if topic == STATUS:
        _summaries(run, as_json, bootstrap, follow)
        return
    tracker = VerdictTracker()
    for record in read_log(config.connect(bootstrap), topic, follow=follow,
                           on_quarantine=report, retry_s=config.retry_s()):
        if run is not None and record.event.run_id != run:
            continue
        doc = record_document(record, tracker.judge(record))
        typer.echo(json.dumps(doc) if as_json else _human(doc))
        if follow:
            sys.stdout.flush()


def _summaries(run: str | None, as_json: bool, bootstrap: str | None, follow: bool) -> None:
    """``runledger.status`` holds derived summaries, not events: its newest one per run."""
    if follow:
        raise UsageError(f"{STATUS} holds run summaries, not events, and is not tailed; "
                         "follow a run with `runledger status RUN --watch`")

    def undecodable(key: str, exc: DecodeError) -> None:
        typer.echo(f"runledger: {STATUS} summary of {key}: {exc}", err=True)

    found = read_status(config.connect(bootstrap), run_id=run, on_undecodable=undecodable)
    for rec in sorted(found.values(), key=lambda r: (r.submitted_at, r.run_id)):
        doc = statusview.document(rec)
        typer.echo(json.dumps(doc) if as_json else
                   f"{rec.run_id} {rec.state} gen={rec.generation} step={rec.step} "
                   f"summarized_at={statusview.iso(rec.header.occurred_at)}")


def dump(topic: Topic = RUNS, run: Run = None, as_json: JsonLines = False,
         bootstrap: Bootstrap = None) -> None:
    """Every event on the topic from the beginning to its current end, then exit."""
    _stream(topic, run, as_json, bootstrap, follow=False)


def tail(topic: Topic = RUNS, run: Run = None, as_json: JsonLines = False,
         bootstrap: Bootstrap = None) -> None:
    """Every event on the topic from the beginning, then new ones as they arrive."""
    follow_ctrl_c()
    _stream(topic, run, as_json, bootstrap, follow=True)

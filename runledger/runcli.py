"""``runledger submit|status|cancel|runs``: operator requests, and a run's state from the log.

Thin: specs are validated by :mod:`controller.spec`, state comes from the pure
fold in :mod:`events.fold`. Requests go to ``runledger.requests`` and the
controller decides on them; ``status`` believes only ``runledger.runs`` (the
authoritative facts), except that a run the controller has not copied there
yet is shown as submitted but unseen. Clocks and ids are read here, at the
edge: the submission id, ``occurred_at``, and "now" for heartbeat ages.

Every command reads the topics it needs from the beginning. That is fine at
today's volumes; the DuckDB projections will answer these questions later.
"""

from __future__ import annotations

import getpass
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
import yaml

from controller.errors import ControllerError, SpecError
from controller.spec import load_spec, parse_spec, parse_spec_json, run_id_for
from dataplane.catalog import Catalog, default_catalog_url, is_manifest_id
from dataplane.errors import CatalogError, DataPlaneError
from events.consume import read_log
from events.errors import EventsError, KafkaOperationError
from events.kafka import EventProducer, Quarantined, bootstrap_from_env, check_broker
from events.model import CancelRequested, Event, Header, RunSubmitted
from events.topics import REPORTS, REQUESTS, RUNS
from runledger.runview import UNSEEN, list_rows, status_document, status_lines

T = TypeVar("T")

AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
Bootstrap = Annotated[
    str | None, typer.Option("--bootstrap", help="Kafka bootstrap (default $RUNLEDGER_BOOTSTRAP).")
]
Principal = Annotated[
    str | None, typer.Option("--principal", help="Who asks (default $USER).")
]
RunArg = Annotated[str, typer.Argument(help="The run id that `runledger submit` printed.")]


def submit(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC.yaml", help="The run spec.")],
    principal: Principal = None,
    as_json: AsJson = False,
    bootstrap: Bootstrap = None,
    catalog: Annotated[
        str | None,
        typer.Option("--catalog", metavar="URL",
                     help="Dataset catalog that resolves an alias in `dataset` (default"
                          " $RUNLEDGER_DATASETS or ~/.local/share/runledger/datasets)."),
    ] = None,
) -> None:
    """Validate a run spec and request the run; print its run id.

    A dataset alias (e.g. corpus/latest) is resolved through the catalog first,
    so the run records the manifest id. An invalid spec is refused with every
    bad field named, and nothing is written.
    """
    try:
        text = spec_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None  # load_spec names the file and the reason
    if text is None:
        spec = _guard(lambda: load_spec(spec_path))
    else:
        resolved, alias = _guard(lambda: _resolving(text, str(spec_path), catalog))
        spec = _guard(lambda: parse_spec(resolved, str(spec_path)))
        if alias is not None:
            typer.echo(f"resolved {alias} -> {spec.dataset}", err=True)
    who = _principal(principal)
    address = _connect(bootstrap)
    # The submission id makes two submissions of one spec two runs; it is made
    # here, never in the pure code, so run_id_for stays deterministic.
    run_id = run_id_for(spec, who, uuid.uuid4().hex)
    digest = spec.digest()
    event = RunSubmitted(
        header=_header(f"{run_id}/submitted", run_id, 0, who),
        spec_digest=digest,
        spec_json=spec.canonical_json(),
        principal=who,
        world_size=spec.world_size,
        dataset_id=spec.dataset,
    )
    _guard(lambda: _send(address, REQUESTS, event))
    if as_json:
        typer.echo(json.dumps({"run_id": run_id, "spec_digest": digest}))
    else:
        typer.echo(run_id)


def resolve_spec_dataset(text: str, source: str, catalog: Catalog) -> tuple[str, str | None]:
    """The spec text with an alias in ``dataset`` replaced by the manifest id it names.

    Returns the text and the alias (None when there was none). Only the value's
    characters change, so comments, key order and a key given twice (which
    :func:`parse_spec` refuses) stay as written. A manifest id is checked
    against the catalog only where a catalog exists, so ids made elsewhere keep
    working. An alias the catalog cannot resolve is a spec problem, reported
    with the spec's other problems; it raises :class:`CatalogError` alone only
    if the spec is otherwise valid.
    """
    node = _dataset_node(text)
    if node is None:
        return text, None  # no (single, plain) dataset value: parse_spec judges it
    value = str(node.value)
    if value.lower().startswith("sha256:"):
        if is_manifest_id(value.lower()) and catalog.exists():
            catalog.resolve(value.lower())
        return text, None
    try:
        mid = catalog.resolve(value)
    except CatalogError as exc:
        try:
            parse_spec(text, source)
        except SpecError as err:
            others = [p for p in err.problems if not p.startswith("dataset:")]
            if others:
                problems = [p if p in others else f"{p}; {exc}" for p in err.problems]
                raise SpecError(source, problems) from None
        raise
    return text[:node.start_mark.index] + mid + text[node.end_mark.index:], value


def _dataset_node(text: str) -> yaml.ScalarNode | None:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    found = [v for k, v in root.value
             if isinstance(k, yaml.ScalarNode) and k.value == "dataset"]
    if len(found) != 1 or not isinstance(found[0], yaml.ScalarNode):
        return None
    node = found[0]
    # Plain or quoted text only: a block scalar or a tagged value is left to the spec check.
    if node.tag != "tag:yaml.org,2002:str" or node.style not in (None, "'", '"'):
        return None
    return node


def _resolving(text: str, source: str, catalog_url: str | None) -> tuple[str, str | None]:
    try:
        store = Catalog(catalog_url if catalog_url is not None else default_catalog_url())
        return resolve_spec_dataset(text, source, store)
    except DataPlaneError as exc:
        _fail(str(exc))


def status(run: RunArg, as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """A run's state: generation, members and heartbeat ages, progress, checkpoint, failures."""
    address = _connect(bootstrap)
    view = _guard(lambda: _load(address, run, with_reports=True))
    doc = status_document(run, view.requests, view.facts, view.reports, _now_ms())
    if doc is None:
        _unknown(run)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        for line in status_lines(doc):
            typer.echo(line)


def cancel(
    run: RunArg,
    reason: Annotated[str, typer.Option("--reason", help="Why; recorded with the request.")],
    principal: Principal = None,
    as_json: AsJson = False,
    bootstrap: Bootstrap = None,
) -> None:
    """Ask the controller to cancel a run.

    The controller checks the principal against the run's cancel authority (the
    spec's list plus the submitter) and records RunCancelled or a WriteRejected.
    """
    who = _principal(principal)
    if not reason.strip():
        _fail("--reason must say why")
    address = _connect(bootstrap)
    view = _guard(lambda: _load(address, run, with_reports=False))
    doc = status_document(run, view.requests, view.facts, (), _now_ms())
    if doc is None:
        _unknown(run)
    if doc["terminal"]:
        _fail(f"run {run} is already {doc['state']}; nothing to cancel")
    if not _may_cancel(view.requests + view.facts, who):
        typer.echo(f"runledger: note: {who!r} is not in the cancel authority of {run}; the"
                   " controller will refuse the request and record the refusal", err=True)
    event_id = f"{run}/cancel/{uuid.uuid4().hex[:12]}"
    event = CancelRequested(header=_header(event_id, run, int(doc["generation"]), who),
                            principal=who, reason=reason)
    _guard(lambda: _send(address, REQUESTS, event))
    if as_json:
        typer.echo(json.dumps({"run_id": run, "event_id": event_id, "principal": who}))
    else:
        typer.echo(f"cancel of {run} requested by {who} ({event_id}); the controller decides")


def runs(as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Every run on the log: id, name, principal, state, generation, submitted at."""
    address = _connect(bootstrap)
    view = _guard(lambda: _load(address, None, with_reports=False))
    rows = list_rows(view.requests, view.facts)
    if as_json:
        typer.echo(json.dumps({"runs": rows}, indent=2))
        return
    typer.echo(f"{'run':<40} {'name':<24} {'principal':<14} {'state':<20} {'gen':>4}  submitted")
    for r in rows:
        state = r["state"] + ("*" if not r["seen_by_controller"] else "")
        typer.echo(f"{r['run_id']:<40} {r['name']:<24} {r['principal']:<14} {state:<20}"
                   f" {r['generation']:>4}  {r['submitted_at_iso']}")
    if any(not r["seen_by_controller"] for r in rows):
        typer.echo(f"* {UNSEEN}")


# --- the edge: clock, identity, broker ---------------------------------------


@dataclass(frozen=True, slots=True)
class _View:
    requests: list[Event]
    facts: list[Event]
    reports: list[Event]


def _load(bootstrap: str, run: str | None, *, with_reports: bool) -> _View:
    """The run's events (all runs' when ``run`` is None) from each topic, in offset order."""
    skipped: list[Quarantined] = []

    def read(topic: str) -> list[Event]:
        def keep(q: Quarantined) -> None:
            if run is None or q.key == run:
                skipped.append(q)

        records = read_log(bootstrap, topic, on_quarantine=keep)
        return [r.event for r in records if run is None or r.event.run_id == run]

    view = _View(read(REQUESTS), read(RUNS), read(REPORTS) if with_reports else [])
    # Nothing vanishes silently: say what could not be decoded (events dump shows it).
    if run is not None:
        for q in skipped:
            typer.echo(f"runledger: warning: {q}", err=True)
    elif skipped:
        typer.echo(f"runledger: warning: {len(skipped)} undecodable records skipped"
                   " (see `runledger events dump`)", err=True)
    return view


def _may_cancel(events: Iterable[Event], principal: str) -> bool:
    for event in events:
        if isinstance(event, RunSubmitted):
            try:
                return parse_spec_json(event.spec_json).may_cancel(principal, event.principal)
            except ControllerError:
                return True  # a spec this version cannot read: leave it to the controller
    return True


def _send(bootstrap: str, topic: str, event: Event) -> None:
    """Write one event and wait until the broker has it (acks=all), or raise."""
    failures: list[str] = []
    # A delivery timeout below the flush timeout turns a lost write into a
    # delivery error with a reason rather than an unexplained flush timeout.
    producer = EventProducer(bootstrap, client_id="runledger-cli",
                             config={"message.timeout.ms": 15_000})
    producer.send(topic, event, on_failure=failures.append)
    producer.flush(30.0)
    if failures:
        raise KafkaOperationError(f"write to {topic}: {failures[0]}")


def _connect(explicit: str | None) -> str:
    """The bootstrap address, after one broker has answered (a fast, clear failure)."""
    address = _guard(lambda: bootstrap_from_env(explicit))
    _guard(lambda: check_broker(address, timeout_s=5.0))
    return address


def _header(event_id: str, run_id: str, generation: int, principal: str) -> Header:
    return Header(event_id=event_id, run_id=run_id, generation=generation,
                  occurred_at=_now_ms(), producer=f"cli/{principal}")


def _principal(explicit: str | None) -> str:
    who = explicit if explicit is not None else os.environ.get("USER", "")
    if explicit is None and not who:
        try:
            who = getpass.getuser()  # LOGNAME and friends, then the password database
        except (OSError, KeyError):
            who = ""
    if not who.strip():
        _fail("no principal: pass --principal or set USER")
    return who.strip()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _guard(action: Callable[[], T]) -> T:
    """Run ``action``; our errors become one line on stderr and exit 1, no traceback."""
    try:
        return action()
    except (EventsError, ControllerError) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("runledger: interrupted", err=True)
        raise typer.Exit(130) from None


def _unknown(run: str) -> NoReturn:
    _fail(f"unknown run {run!r}: not on {REQUESTS} or {RUNS}")


def _fail(message: str) -> NoReturn:
    typer.echo(f"runledger: {message}", err=True)
    raise typer.Exit(1)


__all__ = ["cancel", "runs", "status", "submit"]

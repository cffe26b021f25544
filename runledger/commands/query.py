"""``runledger query NAME RUN``: the ``queries/*.sql`` files against a projection.

``manifest`` is the exception: it reads ``runledger.runs`` itself, rebuilds
the post-run manifest from the run's facts (``runledger.views.manifestview``) and
exits 1 when the log's digest, the rebuilt document or the file disagree.

The projection is the live file when no projector holds it, else the snapshot a
running projector publishes (``queries.source``); how far behind the log it is
goes to stderr, or into the document with ``--json``.

Tested in tests/runledger/commands/test_query.py and
tests/runledger/commands/test_live_queries.py.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from dataplane.errors import DataPlaneError
from dataplane.home import default_catalog_url
from events.kafka.consume import read_log
from events.topics import RUNS
from queries import consumed, lineage, render
from queries.recovery import recovery
from queries.runner import Result, names, run_query
from queries.source import Freshness, open_projection
from runledger import config
from runledger.config import Bootstrap, Db, ProjectedRun, json_option
from runledger.errors import RunledgerError
from runledger.views import manifestview
from worker.storage import read_bytes

FORMATS = ("table", "json", "prov", "openlineage")

QueryName = Annotated[str, typer.Argument(help="ettr, goodput, provenance, audit, incidents,"
                                          " recovery, stragglers, alerts, mixture,"
                                          " timeline, curves or manifest (read from the log).")]
AsRows = Annotated[bool, json_option("Rows as JSON objects.")]
Format = Annotated[str, typer.Option("--format", help="table, json, or for provenance"
                                     " also prov (W3C PROV-JSON) or openlineage.")]
Checkpoint = Annotated[int | None, typer.Option(
    "--checkpoint", help="provenance: the checkpoint's step (default the latest).")]
Ratio = Annotated[float | None, typer.Option(
    "--ratio", help="stragglers: flag ranks slower than RATIO x the others (1.5).")]


def register(app: typer.Typer) -> None:
    app.command()(query)


def query(name: QueryName, run: ProjectedRun, db: Db = None, as_json: AsRows = False,
          fmt: Format = "table", checkpoint: Checkpoint = None, ratio: Ratio = None,
          bootstrap: Bootstrap = None) -> None:
    """Answer a question about a run from the DuckDB projection (`runledger project`);
    `manifest`: the post-run manifest, rebuilt from the log and checked against its file."""
    if name == "manifest":
        _manifest(run, as_json or fmt == "json", bootstrap)
        return
    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        raise RunledgerError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt in ("prov", "openlineage") and name != "provenance":
        raise RunledgerError(f"--format {fmt} is for the provenance query only")
    if name not in names():
        raise RunledgerError(f"unknown query {name!r}; queries: {', '.join(names())}")
    params: dict[str, Any] = {}
    if checkpoint is not None:
        params["checkpoint_step"] = checkpoint
    if ratio is not None:
        params["straggler_ratio"] = ratio
    con, fresh = open_projection(db or config.default_db())
    try:
        # recovery folds its facts in Python (events.recovery), as the controller does.
        result = (recovery(con, run) if name == "recovery"
                  else run_query(con, name, run, **params))
    finally:
        con.close()
    if fmt != "json":  # prov and openlineage are standard documents: no field of ours
        typer.echo(fresh.short(), err=True)  # the whole story: --json's "projection"
    if name == "provenance":
        _provenance(result, fmt, checkpoint, fresh)
    elif fmt == "json":
        typer.echo(json.dumps({"query": name, "run_id": run, "rows": _json_rows(result),
                               "projection": fresh.as_json()}, indent=2))
    else:
        typer.echo(render.table(result))
        if name == "ettr":
            typer.echo(_ettr_line(result))


def _manifest(run: str, as_json: bool, bootstrap: str | None) -> None:
    facts = [r.event for r in read_log(config.bootstrap(bootstrap), RUNS,
                                       retry_s=config.retry_s()) if r.event.run_id == run]
    result = manifestview.check(run, facts, read_bytes)
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        typer.echo("\n".join(manifestview.lines(result)))
    if result["published"] is not None and not result["ok"]:
        raise typer.Exit(1)


def _json_rows(result: Result) -> list[dict[str, Any]]:
    return [{k: render.plain(v) for k, v in r.items()} for r in result.records()]


def _ettr_line(result: Result) -> str:
    rows = {r["part"]: r["seconds"] for r in result.records()}
    allocated = rows.pop("allocated", 0) or 0
    if not allocated:
        return "ETTR: no allocated time yet"
    total = sum(rows.values())
    return (f"ETTR {rows.get('productive', 0) / allocated:.3f}  (parts sum to {total:.3f} s"
            f" of {allocated:.3f} s allocated)")


def _catalog(dataset_id: str | None) -> consumed.Known:
    """What the catalog says about the dataset the id pins (tokenizer, sources), or why
    it says nothing: no dataset recorded, the id not in it, or the catalog unreachable."""
    if not dataset_id:
        return consumed.unknown(consumed.NO_DATASET)
    url = default_catalog_url()
    try:
        manifest = config.catalog(url).get(dataset_id)
    except DataPlaneError as exc:  # not held there, not a manifest id, an altered copy
        return consumed.unknown(f"not known here: {exc}; set RUNLEDGER_DATASETS to the"
                                " catalog the dataset was built in (the dataset id pins it)")
    except OSError as exc:
        return consumed.unknown(f"not known here: the catalog {url} is not reachable ({exc})")
    tok = manifest.tokenizer
    return {"known": True, "name": manifest.name, "tokenizer": tok.name,
            "tokenizer_version": tok.version, "tokenizer_vocab_digest": tok.vocab_digest,
            "sources": sorted(manifest.mixture.weights),
            "mixture_mode": manifest.mixture.mode, "mixture_unit": manifest.mixture.unit}


def _provenance(result: Result, fmt: str, checkpoint: int | None, fresh: Freshness) -> None:
    chain = [{k: render.plain(v) for k, v in r.items()} for r in result.records()]
    if not chain:
        which = f"at step {checkpoint}" if checkpoint is not None else "committed yet"
        raise RunledgerError(f"run {result.run_id} has no checkpoint {which}")
    catalog = _catalog(chain[0].get("dataset_id"))
    facts = {k: v for k, v in catalog.items() if k != "known"} if catalog["known"] else None
    if fmt == "prov":
        typer.echo(json.dumps(lineage.prov(result.run_id, chain, facts), indent=2))
    elif fmt == "openlineage":
        typer.echo(json.dumps(lineage.openlineage(result.run_id, chain, facts), indent=2))
    elif fmt == "json":
        doc = consumed.document(result.run_id, chain, catalog)
        typer.echo(json.dumps(doc | {"projection": fresh.as_json()}, indent=2))
    else:
        typer.echo("\n".join(consumed.lines(chain, catalog)))
        # Columns no link has a value in (a job's own loader: no positions) are left out:
        # the "consumed" line above says why.
        cols = [c for c in result.columns if c in _LINEAGE_COLUMNS
                and any(r[c] is not None for r in chain)]
        typer.echo(render.table(Result(result.name, result.run_id, cols,
                                       [tuple(r[c] for c in cols)
                                        for r in result.records()])))


_LINEAGE_COLUMNS = ("depth", "generation", "step_from", "step", "position_from", "position_to",
                    "source_delta", "manifest_digest")

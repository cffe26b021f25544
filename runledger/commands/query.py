"""``runledger query NAME RUN``: the ``queries/*.sql`` files against a projection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from dataplane.catalog import Catalog, default_catalog_url
from dataplane.errors import DataPlaneError
from queries import lineage, render
from queries.errors import QueryError
from queries.runner import Result, connect, names, run_query
from runledger.commands.project import _default_db
from runledger.commands.runs import _fail

FORMATS = ("table", "json", "prov", "openlineage")


def query(
    name: Annotated[str, typer.Argument(help="ettr, goodput, provenance, audit, incidents,"
                                        " stragglers, alerts, mixture or timeline.")],
    run: Annotated[str, typer.Argument(help="The run id.")],
    db: Annotated[Path | None, typer.Option("--db", help="The projection (default"
                                            " $RUNLEDGER_HOME/projection.duckdb).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Rows as JSON objects.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table, json, or for provenance"
                                     " also prov (W3C PROV-JSON) or openlineage.")] = "table",
    checkpoint: Annotated[int | None, typer.Option(
        "--checkpoint", help="provenance: the checkpoint's step (default the latest).")] = None,
    ratio: Annotated[float | None, typer.Option(
        "--ratio", help="stragglers: flag ranks slower than RATIO x the others (1.5).")] = None,
) -> None:
    """Answer a question about a run from the DuckDB projection (`runledger project`)."""
    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        _fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt in ("prov", "openlineage") and name != "provenance":
        _fail(f"--format {fmt} is for the provenance query only")
    if name not in names():
        _fail(f"unknown query {name!r}; queries: {', '.join(names())}")
    params: dict[str, Any] = {}
    if checkpoint is not None:
        params["checkpoint_step"] = checkpoint
    if ratio is not None:
        params["straggler_ratio"] = ratio
    try:
        con = connect(db or _default_db())
        try:
            result = run_query(con, name, run, **params)
        finally:
            con.close()
    except QueryError as exc:
        _fail(str(exc))
    if name == "provenance":
        _provenance(result, fmt, checkpoint)
    elif fmt == "json":
        typer.echo(json.dumps(_json_rows(result), indent=2))
    else:
        typer.echo(render.table(result))
        if name == "ettr":
            typer.echo(_ettr_line(result))


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


def _dataset(dataset_id: str | None) -> dict[str, Any] | None:
    """What the catalog says about the dataset the id pins (tokenizer, sources), if reachable."""
    if not dataset_id:
        return None
    try:
        manifest = Catalog(default_catalog_url()).get(dataset_id)
    except (DataPlaneError, OSError):
        return None
    tok = manifest.tokenizer
    return {"name": manifest.name, "tokenizer": tok.name, "tokenizer_version": tok.version,
            "tokenizer_vocab_digest": tok.vocab_digest,
            "sources": sorted(manifest.mixture.weights),
            "mixture_mode": manifest.mixture.mode, "mixture_unit": manifest.mixture.unit}


def _provenance(result: Result, fmt: str, checkpoint: int | None) -> None:
    chain = [{k: render.plain(v) for k, v in r.items()} for r in result.records()]
    if not chain:
        which = f"at step {checkpoint}" if checkpoint is not None else "committed yet"
        _fail(f"run {result.run_id} has no checkpoint {which}")
    dataset = _dataset(chain[0].get("dataset_id"))
    if fmt == "prov":
        typer.echo(json.dumps(lineage.prov(result.run_id, chain, dataset), indent=2))
    elif fmt == "openlineage":
        doc = lineage.openlineage(result.run_id, chain, dataset,
                                  event_time=str(chain[0]["committed_at"]))
        typer.echo(json.dumps(doc, indent=2))
    elif fmt == "json":
        typer.echo(json.dumps({"run_id": result.run_id, "dataset": dataset, "chain": chain},
                              indent=2))
    else:
        head = chain[0]
        typer.echo(f"checkpoint step {head['step']} (generation {head['generation']})"
                   f" {head['manifest_digest']}\n  manifest  {head['manifest_path']}\n"
                   f"  dataset   {head['dataset_id']}\n  code      {head['code_version']}")
        if dataset:
            typer.echo(f"  tokenizer {dataset['tokenizer']} {dataset['tokenizer_version']}"
                       f" ({dataset['tokenizer_vocab_digest']})")
        else:
            typer.echo("  tokenizer (catalog not reachable: set RUNLEDGER_DATASETS; the"
                       " dataset id pins it)")
        typer.echo(f"  consumed  positions [0, {head['position_to']}) in"
                   f" {len(chain)} segment(s); per-source counts {head['source_counts']}")
        typer.echo(render.table(Result(result.name, result.run_id,
                                       [c for c in result.columns if c in _LINEAGE_COLUMNS],
                                       [tuple(r[c] for c in result.columns
                                              if c in _LINEAGE_COLUMNS)
                                        for r in result.records()])))


_LINEAGE_COLUMNS = ("depth", "generation", "step_from", "step", "position_from", "position_to",
                    "source_delta", "manifest_digest")

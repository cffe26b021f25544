r"""``runledger dataset synth|build|show|alias|resolve|list``: dataset manifests and their catalog.

Thin: templates are built by :func:`dataplane.catalog.build_manifest`, stored
and named by :class:`dataplane.catalog.Catalog`, the demo corpus comes from
:mod:`dataplane.synth`. Their errors (:class:`~dataplane.errors.DataPlaneError`)
reach the CLI's error policy as they are; an I/O error at this edge is turned
into a :class:`~runledger.errors.RunledgerError` with the same message.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from dataplane.catalog import Catalog, build_manifest
from dataplane.errors import DataPlaneError
from dataplane.manifest import DatasetManifest
from dataplane.synth import template, write_corpus
from runledger import config
from runledger.config import CatalogUrl, json_option
from runledger.errors import RunledgerError

AsJson = Annotated[bool, json_option("Print JSON.")]
Ref = Annotated[str, typer.Argument(metavar="ID|ALIAS", help="A manifest id or an alias.")]
TemplatePath = Annotated[Path, typer.Argument(metavar="TEMPLATE.yaml",
                                              help="A manifest template.")]


def register(app: typer.Typer) -> None:
    dataset_app = typer.Typer(
        help=(
            "Dataset manifests: build them from templates, store them by id in a catalog"
            " ($RUNLEDGER_DATASETS or $RUNLEDGER_HOME/datasets), name them with"
            " aliases."
        ),
        no_args_is_help=True,
    )
    dataset_app.command()(synth)
    dataset_app.command()(build)
    dataset_app.command()(show)
    dataset_app.command("alias")(alias_cmd)
    dataset_app.command()(resolve)
    dataset_app.command("list")(list_cmd)
    app.add_typer(dataset_app, name="dataset")


@contextlib.contextmanager
def _io_errors() -> Iterator[None]:
    """An I/O error at this edge (the corpus, the template, the catalog's files) as one line."""
    try:
        yield
    except OSError as exc:
        raise RunledgerError(str(exc)) from None


def synth(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the corpus.")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Generator seed.")] = 0,
    as_json: AsJson = False,
) -> None:
    """Write the synthetic three-source corpus and its manifest template DIR/dataset.yaml."""
    root = os.path.abspath(directory)
    path = Path(root) / "dataset.yaml"
    header = (f"# The synthetic corpus of `runledger dataset synth --seed {seed}`.\n"
              f"# Build it: runledger dataset build {path} --alias synth/latest\n")
    with _io_errors():
        write_corpus(root, seed=seed)
        body = yaml.safe_dump(template(root, seed=seed), sort_keys=False)
        path.write_text(header + body, encoding="utf-8")
    typer.echo(json.dumps({"directory": root, "template": str(path), "seed": seed})
               if as_json else str(path))


def build(
    template_path: TemplatePath,
    catalog: CatalogUrl = None,
    alias: Annotated[str | None, typer.Option("--alias", help="Point this alias at it.")] = None,
    as_json: AsJson = False,
) -> None:
    """Build a manifest from a template (globs expanded, every object read), store it, print its id.

    A relative root or access entry is taken against the template's directory.
    """
    where = str(template_path)
    try:
        text = template_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunledgerError(f"{where}: cannot read the template: {exc}") from None
    base = os.path.dirname(os.path.abspath(template_path))
    with _io_errors():
        manifest = build_manifest(text, base, source=where)
        store = config.catalog(catalog)
        mid = store.put(manifest)
        if alias is not None:
            store.set_alias(alias, mid)
    if as_json:
        doc = {"id": mid, "name": manifest.name, "alias": alias, "catalog": store.url,
               "sources": [_source_row(manifest, s.name) for s in manifest.sources]}
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(mid)


def show(ref: Ref, catalog: CatalogUrl = None, as_json: AsJson = False) -> None:
    """A manifest's summary, or (--json) its canonical JSON exactly as stored."""
    with _io_errors():
        store = config.catalog(catalog)
        mid = store.resolve(ref)
        manifest = store.get(mid)
        if as_json:
            typer.echo(manifest.canonical_json())
            return
        aliases = [a for a, i in store.aliases().items() if i == mid]
    for line in summary_lines(manifest, aliases):
        typer.echo(line)


def alias_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The alias, e.g. corpus/latest.")],
    ref: Ref,
    catalog: CatalogUrl = None,
    as_json: AsJson = False,
) -> None:
    """Point NAME at a stored manifest (given by id or by another alias)."""
    with _io_errors():
        store = config.catalog(catalog)
        mid = store.resolve(ref)
        previous = store.set_alias(name, mid)
    if as_json:
        typer.echo(json.dumps({"alias": name, "manifest_id": mid, "previous": previous}))
        return
    was = f" (was {previous})" if previous and previous != mid else ""
    typer.echo(f"{name} -> {mid}{was}")


def resolve(ref: Ref, catalog: CatalogUrl = None, as_json: AsJson = False) -> None:
    """Print the manifest id an alias (or id) names."""
    with _io_errors():
        mid = config.catalog(catalog).resolve(ref)
    typer.echo(json.dumps({"ref": ref, "manifest_id": mid}) if as_json else mid)


def list_cmd(catalog: CatalogUrl = None, as_json: AsJson = False) -> None:
    """Every stored manifest (id, name, records, tokens, aliases). Exit 1 if one is damaged."""
    with _io_errors():
        store = config.catalog(catalog)
        aliases = store.aliases()
        rows = _rows(store, aliases)
    if as_json:
        typer.echo(json.dumps({"catalog": store.url, "manifests": rows, "aliases": aliases},
                              indent=2))
    else:
        typer.echo(f"{'id':<71}  {'name':<16} {'sources':>7} {'records':>9} {'tokens':>11}"
                   "  aliases")
        for r in rows:
            if "error" in r:
                typer.echo(f"{r['id']:<71}  DAMAGED: {r['error']}")
                continue
            typer.echo(f"{r['id']:<71}  {r['name']:<16} {r['sources']:>7} {r['records']:>9}"
                       f" {r['tokens']:>11}  {', '.join(r['aliases']) or '-'}")
    damaged = [r["id"] for r in rows if "error" in r]
    if damaged:
        raise RunledgerError(
            f"{len(damaged)} stored manifest(s) are damaged: {', '.join(damaged)}")


def _rows(store: Catalog, aliases: dict[str, str]) -> list[dict[str, Any]]:
    """One row per stored manifest; a damaged one says what is wrong with it."""
    rows: list[dict[str, Any]] = []
    for mid in store.ids():
        names = [a for a, i in aliases.items() if i == mid]
        try:
            m = store.get(mid)
        except DataPlaneError as exc:
            rows.append({"id": mid, "aliases": names, "error": str(exc)})
            continue
        rows.append({"id": mid, "name": m.name, "sources": len(m.sources),
                     "records": sum(s.records for s in m.sources),
                     "tokens": sum(s.tokens for s in m.sources), "aliases": names})
    return rows


def summary_lines(m: DatasetManifest, aliases: list[str]) -> list[str]:
    """The human summary of ``dataset show``."""
    tok = m.tokenizer
    lines = [
        f"dataset    {m.dataset_id}",
        f"name       {m.name}",
        f"aliases    {', '.join(aliases) or '-'}",
        f"root       {m.root}",
        f"{'source':<16} {'objects':>7} {'records':>9} {'tokens':>11} {'bytes':>12} {'weight':>8}",
    ]
    shares = m.mixture.fractions()
    for s in m.sources:
        r = _source_row(m, s.name)
        weight = f"{float(shares[s.name]):.4g}"
        lines.append(f"  {s.name:<14} {r['objects']:>7} {r['records']:>9} {r['tokens']:>11}"
                     f" {r['bytes']:>12} {weight:>8}")
    eos = f" eos {tok.eos_id}" if tok.eos_id is not None else ""
    lines += [
        f"tokenizer  {tok.name} {tok.version}, vocab {tok.vocab_size}{eos} ({tok.vocab_digest})",
        f"packing    {m.packing.mode}, seq_len {m.packing.seq_len}, pad {m.packing.pad_id}",
        f"mixture    {m.mixture.mode}, unit {m.mixture.unit}, exhaustion"
        f" {m.mixture.exhaustion}, replacement {'yes' if m.mixture.replacement else 'no'}",
        "transforms " + (", ".join(f"{t.kind}({t.max_tokens}, {t.mode})" for t in m.transforms)
                         or "none"),
        f"access     {', '.join(m.access)}",
    ]
    return lines


def _source_row(m: DatasetManifest, name: str) -> dict[str, Any]:
    s = m.source(name)
    return {"name": s.name, "objects": len(s.objects), "records": s.records,
            "tokens": s.tokens, "bytes": sum(o.bytes for o in s.objects),
            "weight": m.mixture.weights[s.name]}


__all__ = ["register", "summary_lines"]

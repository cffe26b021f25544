"""``runledger dataset synth|build|show|alias|resolve|list``: dataset manifests and their catalog.

Thin: templates are built by :func:`dataplane.catalog.build_manifest`, stored
and named by :class:`dataplane.catalog.Catalog`, the demo corpus comes from
:mod:`dataplane.synth`. Every :class:`~dataplane.errors.DataPlaneError` (and an
I/O error at the edge) becomes ``runledger: <message>`` on stderr and exit 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import yaml

from dataplane.catalog import Catalog, build_manifest, default_catalog_url
from dataplane.errors import DataPlaneError
from dataplane.manifest import DatasetManifest
from dataplane.synth import template, write_corpus

T = TypeVar("T")

dataset_app = typer.Typer(
    help=(
        "Dataset manifests: build them from templates, store them by id in a catalog"
        " ($RUNLEDGER_DATASETS or ~/.local/share/runledger/datasets), name them with aliases."
    ),
    no_args_is_help=True,
)

CatalogOpt = Annotated[
    str | None,
    typer.Option("--catalog", metavar="URL",
                 help="Catalog directory or fsspec URL (default $RUNLEDGER_DATASETS or"
                      " ~/.local/share/runledger/datasets)."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Ref = Annotated[str, typer.Argument(metavar="ID|ALIAS", help="A manifest id or an alias.")]


@dataset_app.command()
def synth(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the corpus.")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Generator seed.")] = 0,
) -> None:
    """Write the synthetic three-source corpus and its manifest template DIR/dataset.yaml."""
    root = os.path.abspath(directory)
    _guard(lambda: write_corpus(root, seed=seed))
    path = Path(root) / "dataset.yaml"
    header = (f"# The synthetic corpus of `runledger dataset synth --seed {seed}`.\n"
              f"# Build it: runledger dataset build {path} --alias synth/latest\n")
    body = yaml.safe_dump(template(root, seed=seed), sort_keys=False)
    _guard(lambda: path.write_text(header + body, encoding="utf-8"))
    typer.echo(str(path))


@dataset_app.command()
def build(
    template_path: Annotated[Path, typer.Argument(metavar="TEMPLATE.yaml",
                                                  help="A manifest template.")],
    catalog: CatalogOpt = None,
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
        _fail(f"{where}: cannot read the template: {exc}")
    base = os.path.dirname(os.path.abspath(template_path))
    manifest = _guard(lambda: build_manifest(text, base, source=where))
    store = _catalog(catalog)
    mid = _guard(lambda: store.put(manifest))
    if alias is not None:
        _guard(lambda: store.set_alias(alias, mid))
    if as_json:
        doc = {"id": mid, "name": manifest.name, "alias": alias, "catalog": store.url,
               "sources": [_source_row(manifest, s.name) for s in manifest.sources]}
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(mid)


@dataset_app.command()
def show(ref: Ref, catalog: CatalogOpt = None, as_json: AsJson = False) -> None:
    """A manifest's summary, or (--json) its canonical JSON exactly as stored."""
    store = _catalog(catalog)
    mid = _guard(lambda: store.resolve(ref))
    manifest = _guard(lambda: store.get(mid))
    if as_json:
        typer.echo(manifest.canonical_json())
        return
    for line in summary_lines(manifest, [a for a, i in store.aliases().items() if i == mid]):
        typer.echo(line)


@dataset_app.command("alias")
def alias_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The alias, e.g. corpus/latest.")],
    ref: Ref,
    catalog: CatalogOpt = None,
) -> None:
    """Point NAME at a stored manifest (given by id or by another alias)."""
    store = _catalog(catalog)
    mid = _guard(lambda: store.resolve(ref))
    previous = _guard(lambda: store.set_alias(name, mid))
    was = f" (was {previous})" if previous and previous != mid else ""
    typer.echo(f"{name} -> {mid}{was}")


@dataset_app.command()
def resolve(ref: Ref, catalog: CatalogOpt = None) -> None:
    """Print the manifest id an alias (or id) names."""
    store = _catalog(catalog)
    typer.echo(_guard(lambda: store.resolve(ref)))


@dataset_app.command("list")
def list_cmd(catalog: CatalogOpt = None, as_json: AsJson = False) -> None:
    """Every stored manifest (id, name, records, tokens, aliases). Exit 1 if one is damaged."""
    store = _catalog(catalog)
    aliases = _guard(store.aliases)
    rows: list[dict[str, Any]] = []
    for mid in _guard(store.ids):
        names = [a for a, i in aliases.items() if i == mid]
        try:
            m = store.get(mid)
        except DataPlaneError as exc:
            rows.append({"id": mid, "aliases": names, "error": str(exc)})
            continue
        rows.append({"id": mid, "name": m.name, "sources": len(m.sources),
                     "records": sum(s.records for s in m.sources),
                     "tokens": sum(s.tokens for s in m.sources), "aliases": names})
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
        _fail(f"{len(damaged)} stored manifest(s) are damaged: {', '.join(damaged)}")


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


def _catalog(url: str | None) -> Catalog:
    return _guard(lambda: Catalog(url if url is not None else default_catalog_url()))


def _guard(action: Callable[[], T]) -> T:
    """Run ``action``; data plane and I/O errors become one message on stderr and exit 1."""
    try:
        return action()
    except DataPlaneError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("runledger: interrupted", err=True)
        raise typer.Exit(130) from None


def _fail(message: str) -> NoReturn:
    typer.echo(f"runledger: {message}", err=True)
    raise typer.Exit(1)


__all__ = ["dataset_app", "summary_lines"]

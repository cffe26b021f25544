"""``runledger checkpoint list|gc``: a run's checkpoints as the log records them, per
storage tier (``runledger.views.ckpttiers``).

"Latest" and "committed" come only from ``runledger.runs``; the storage
listing only says what is there to remove.

Tested in tests/e2e/test_checkpoint.py and tests/runledger/commands/test_checkpoint.py.
"""

from __future__ import annotations

import json
from typing import Annotated

import fsspec
import typer

from events.kafka.consume import read_log
from events.model import Event
from events.topics import RUNS
from runledger import config
from runledger.config import AsJson, Bootstrap, RunArg
from runledger.errors import RunledgerError, UsageError
from runledger.views.ckpttiers import copies, gc_plan, spec_checkpoint
from worker.gc import Retention, collect, history


def register(app: typer.Typer) -> None:
    checkpoint_app = typer.Typer(
        help="A run's checkpoints: what the log committed; collection.", no_args_is_help=True)
    checkpoint_app.command("list")(list_)
    checkpoint_app.command("gc")(gc)
    app.add_typer(checkpoint_app, name="checkpoint")


def _facts(bootstrap: str, run: str) -> list[Event]:
    events = [r.event for r in read_log(bootstrap, RUNS, retry_s=config.retry_s())
              if r.event.run_id == run]
    if not events:
        raise RunledgerError(f"no run {run!r} on {RUNS}; `runledger runs` lists the runs")
    return events


def list_(run: RunArg, as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Every committed checkpoint of a run, oldest first, with the storage tiers holding
    a verified copy, revocations, and copies gone from storage (removed by `checkpoint
    gc` under retention)."""
    facts = _facts(config.connect(bootstrap), run)
    ckpt = spec_checkpoint(facts)
    rows = copies(facts, ckpt.storage_tiers() if ckpt is not None else ())
    for r in rows:
        for held in r["tiers"]:
            held["removed"] = not _stored(held["manifest"])
        r["removed"] = r["tiers"][0]["removed"]  # the first tier's copy, the committed one
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        mark = f"  REVOKED ({r['revoked']})" if r["revoked"] else ""
        mark += "  REMOVED (gone from storage: retention)" if r["removed"] else ""
        tiers = ", ".join(h["tier"] + (" (removed)" if h["removed"] else "")
                          for h in r["tiers"])
        typer.echo(f"g{r['generation']:<4} step {r['step']:<8} {r['manifest']}  tiers:"
                   f" {tiers}{mark}")


def _stored(manifest: str) -> bool:
    """Whether the manifest is still in storage: the log keeps every commit, gc removes
    the files, so storage is what tells a removed checkpoint from a kept one."""
    try:
        fs, path = fsspec.core.url_to_fs(manifest)
        return bool(fs.exists(path))
    except (OSError, ValueError, ImportError):
        return True  # unreachable storage proves nothing removed


def gc(
    run: RunArg,
    root: Annotated[str | None, typer.Option(
        "--root", help="Collect this one checkpoint root (an fsspec URL) instead of the"
        " run's tiers.")] = None,
    tier: Annotated[str | None, typer.Option(
        "--tier", help="Collect only this tier of the run's spec.")] = None,
    keep_last: Annotated[int | None, typer.Option(
        "--keep-last", min=1, help="Default: each tier's keep_last from the spec; 3 with"
        " --root.")] = None,
    keep_every: Annotated[int | None, typer.Option("--keep-every", min=1)] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Directories per pass.")] = 16,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
    bootstrap: Bootstrap = None,
    as_json: AsJson = False,
) -> None:
    """Remove checkpoints outside retention and fenced staging residue; never the latest.
    Every tier of the run's spec, each with its own keep_last, unless --root names one."""
    if root is not None and tier is not None:
        raise UsageError("give --root or --tier, not both: --tier picks a root from the"
                         " run's spec")
    facts = _facts(config.connect(bootstrap), run)
    hist = history(facts)
    if root is not None:
        urls = collect(root, run, hist, Retention(keep_last or 3, keep_every, limit),
                       dry_run=dry_run)
        if as_json:
            typer.echo(json.dumps({"run_id": run, "dry_run": dry_run, "removed": list(urls)}))
            return
        for url in urls:
            typer.echo(("would remove " if dry_run else "removed ") + url)
        return
    plans = gc_plan(facts, spec_checkpoint(facts), only=tier, keep_last=keep_last,
                    keep_every=keep_every, limit=limit)
    done = [(p, collect(p.tier.root, run, hist, p.keep, dry_run=dry_run, pinned=p.pinned))
            for p in plans]
    if as_json:
        typer.echo(json.dumps({
            "run_id": run, "dry_run": dry_run, "removed": [u for _, urls in done for u in urls],
            "tiers": [{"tier": p.tier.name, "root": p.tier.root, "keep_last": p.keep.keep_last,
                       "pinned_steps": sorted(s for _, s in p.pinned), "removed": urls}
                      for p, urls in done]}))
        return
    for p, urls in done:
        typer.echo(f"tier {p.tier.name} ({p.tier.root}, keep_last {p.keep.keep_last}):"
                   + ("" if urls else " nothing to remove"))
        for url in urls:
            typer.echo(("  would remove " if dry_run else "  removed ") + url)

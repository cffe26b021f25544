"""``runledger checkpoint list|gc``: a run's checkpoints as the log records them.

"Latest" and "committed" come only from ``runledger.runs``; the storage
listing only says what is there to remove.

Tested in tests/e2e/test_checkpoint.py.
"""

from __future__ import annotations

import json
from typing import Annotated

import fsspec
import typer

from events.consume import read_log
from events.model import CheckpointRevoked, Event, ManifestCommitted
from events.topics import RUNS
from runledger import config
from runledger.config import AsJson, Bootstrap, RunArg
from runledger.errors import RunledgerError
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
    """Every committed checkpoint of a run, oldest first, with revocations and those
    whose manifest is gone from storage (removed by `checkpoint gc` under retention)."""
    facts = _facts(config.connect(bootstrap), run)
    revoked = {e.manifest_digest: e.reason for e in facts if isinstance(e, CheckpointRevoked)}
    rows = [{"generation": e.generation, "step": e.step, "manifest": e.manifest_path,
             "digest": e.manifest_digest, "revoked": revoked.get(e.manifest_digest),
             "removed": not _stored(e.manifest_path)}
            for e in facts if isinstance(e, ManifestCommitted)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        mark = f"  REVOKED ({r['revoked']})" if r["revoked"] else ""
        mark += "  REMOVED (gone from storage: retention)" if r["removed"] else ""
        typer.echo(f"g{r['generation']:<4} step {r['step']:<8} {r['manifest']}{mark}")


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
    root: Annotated[str, typer.Option("--root", help="The checkpoint root (an fsspec URL).")],
    keep_last: Annotated[int, typer.Option("--keep-last", min=1)] = 3,
    keep_every: Annotated[int | None, typer.Option("--keep-every", min=1)] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Directories per pass.")] = 16,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
    bootstrap: Bootstrap = None,
    as_json: AsJson = False,
) -> None:
    """Remove checkpoints outside retention and fenced staging residue; never the latest."""
    facts = _facts(config.connect(bootstrap), run)
    urls = collect(root, run, history(facts), Retention(keep_last, keep_every, limit),
                   dry_run=dry_run)
    if as_json:
        typer.echo(json.dumps({"run_id": run, "dry_run": dry_run, "removed": list(urls)}))
        return
    for url in urls:
        typer.echo(("would remove " if dry_run else "removed ") + url)

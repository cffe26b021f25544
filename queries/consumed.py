"""What a checkpoint's provenance chain says the run consumed, and why where it cannot.

The rows are the ``provenance`` query's (JSON-ready: ``render.plain``). A job
that loads its own data (README, "Your own job") commits its checkpoints with
no data cursor, so the log holds the dataset id the run was submitted with but
no sample positions nor per-source counts. Each part is therefore either
``{"known": true, ...value}`` or ``{"known": false, "reason": ...}``, and the
text form says the reason in words: never a bare ``None`` for the reader to
interpret. ``lines`` and ``document`` are what ``runledger query provenance``
prints (as text, and with ``--json``); ``queries.lineage`` exports the same
facts as PROV-JSON and OpenLineage.

Tested in tests/queries/test_consumed.py and tests/runledger/commands/test_query.py.
"""

from __future__ import annotations

from typing import Any

NO_DATASET = "not recorded: the run was submitted without a dataset"
NO_POSITIONS = "not recorded: the job's own loader reports no positions"
NO_COUNTS = "not recorded: the job's own loader reports no per-source counts"
NO_CURSOR_COUNTS = "not recorded: the data cursor carried no per-source counts"
NO_CODE = "not recorded: the run spec names no code version"
# The columns about the run rather than the link (the same on every row).
RUN_COLUMNS = ("run_outcome", "run_ended_at", "run_end_reason")
# What only a data cursor gives a link: absent from a link that has none.
CURSOR_COLUMNS = ("epoch", "position_from", "position_to", "source_counts", "source_delta")

Row = dict[str, Any]
Known = dict[str, Any]  # {"known": True, ...} or {"known": False, "reason": str}


def unknown(reason: str) -> Known:
    return {"known": False, "reason": reason}


def dataset(head: Row) -> Known:
    """The dataset id and what recorded it: the cursor, else the run's submission."""
    if not head.get("dataset_id"):
        return unknown(NO_DATASET)
    return {"known": True, "id": head["dataset_id"], "recorded_by": head["dataset_from"]}


def positions(chain: list[Row]) -> Known:
    """The global sample positions ``[0, to)`` the checkpoint's weights consumed: the
    head's cursor alone says it (a cursor's position counts from the run's start)."""
    head = chain[0]
    if not head.get("positions_recorded"):
        return unknown(NO_POSITIONS)
    return {"known": True, "from": 0, "to": head["position_to"], "segments": len(chain),
            "segments_recorded": sum(1 for c in chain if c.get("positions_recorded"))}


def segment_positions(link: Row) -> Known:
    """One link's range ``[from, to)``: known when it and its parent have a cursor."""
    if not link.get("positions_recorded"):
        return unknown(NO_POSITIONS)
    if link.get("position_from") is None:
        return unknown("not recorded: the parent checkpoint has no data cursor")
    return {"known": True, "from": link["position_from"], "to": link["position_to"]}


def source_counts(head: Row) -> Known:
    if not head.get("positions_recorded"):
        return unknown(NO_COUNTS)
    if head.get("source_counts") is None:
        return unknown(NO_CURSOR_COUNTS)
    return {"known": True, "counts": head["source_counts"]}


def run_end(head: Row) -> dict[str, Any]:
    """How the run ended: ``outcome`` (succeeded, failed, cancelled or unfinished), and
    when and why once it ended."""
    out: dict[str, Any] = {"outcome": head.get("run_outcome") or "unfinished"}
    if head.get("run_ended_at") is not None:
        out |= {"ended_at": head["run_ended_at"], "reason": head.get("run_end_reason") or ""}
    return out


def link(row: Row) -> Row:
    """A chain row for ``--json``: the link's own columns; without a cursor, none of the
    cursor's (``positions_recorded`` false says so, ``consumed`` says why)."""
    drop = set(RUN_COLUMNS) | (set() if row.get("positions_recorded") else set(CURSOR_COLUMNS))
    return {k: v for k, v in row.items() if k not in drop}


def document(run_id: str, chain: list[Row], catalog: Known) -> dict[str, Any]:
    """``query provenance --json`` (less the projection's freshness, which the CLI adds)."""
    head = chain[0]
    return {"run_id": run_id, "run": run_end(head),
            "consumed": {"dataset": dataset(head), "positions": positions(chain),
                         "source_counts": source_counts(head)},
            "catalog": catalog, "chain": [link(r) for r in chain]}


def lines(chain: list[Row], catalog: Known) -> list[str]:
    """The text header of ``query provenance``: one fact a line, each known or why not."""
    head = chain[0]
    ds, pos, counts = dataset(head), positions(chain), source_counts(head)
    if not ds["known"]:
        ds_text = ds["reason"]
    elif ds["recorded_by"] == "cursor":
        ds_text = ds["id"]
    else:
        ds_text = f"{ds['id']} (as submitted: the job loads its own data)"
    if catalog["known"]:
        tok = (f"{catalog['tokenizer']} {catalog['tokenizer_version']}"
               f" ({catalog['tokenizer_vocab_digest']})")
    else:
        tok = catalog["reason"]
    if pos["known"]:
        used = f"positions [0, {pos['to']}) in {pos['segments']} segment(s)"
    else:
        used = f"positions {pos['reason']} ({len(chain)} segment(s))"
    used += "; per-source counts " + (str(counts["counts"]) if counts["known"]
                                      else counts["reason"])
    return [f"checkpoint step {head['step']} (generation {head['generation']})"
            f" {head['manifest_digest']}",
            f"  manifest  {head['manifest_path']}",
            f"  dataset   {ds_text}",
            f"  code      {head.get('code_version') or NO_CODE}",
            f"  tokenizer {tok}",
            f"  consumed  {used}"]

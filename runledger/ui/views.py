"""What each page of the live view shows, as JSON documents. Pure.

The run summaries come from ``runledger.status`` (made into ``status``'s own
document by ``runledger.views.statusview.document``); what only the projection knows
(ETTR so far, the newest step it has seen, the curves, the timeline, alerts,
checkpoints, provenance) is passed in as plain rows, already read. "Now" is a
parameter. Nothing here reads a secret: a summary holds none, and the spec,
the credentials and the keys are never part of a document.

Tested in tests/runledger/ui/test_views.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

# How many runs the table shows by default: every live run, and the newest ended ones.
RECENT_ENDED = 50


def _log_link(run_id: str, generation: object, member: object) -> str | None:
    if generation is None or not member:
        return None
    return (f"/runs/{quote(run_id, safe='')}/logs?generation={generation}"
            f"&rank={quote(str(member), safe='')}")


def progress(doc: Mapping[str, Any], projected_step: int | None) -> dict[str, Any]:
    """The step a run is at: the summary's, or the projection's when that is newer (a
    summary carries progress at most ``events.status.PROGRESS_EVERY_MS`` late), with
    tokens and the data cursor."""
    step = doc["step"]
    source = "runledger.status"
    if projected_step is not None and projected_step > step and not doc["terminal"]:
        step, source = projected_step, "projection"
    cursor = doc.get("cursor") or {}
    return {"step": step, "step_source": source, "tokens": doc["tokens"],
            "epoch": cursor.get("epoch"), "position": cursor.get("position")}


def run_row(doc: Mapping[str, Any], ettr: float | None, projected_step: int | None,
            now_ms: int) -> dict[str, Any]:
    """One line of the runs table."""
    ckpt = doc.get("checkpoint") or {}
    return {
        "run_id": doc["run_id"], "name": doc["name"], "owner": doc["principal"],
        "state": doc["state"], "terminal": doc["terminal"], "generation": doc["generation"],
        **progress(doc, projected_step),
        "ettr": None if ettr is None else round(ettr, 4),
        "checkpoint_step": ckpt.get("step"), "failures": doc["failure_count"],
        "alerts": doc["alerts"], "world_size": doc["world_size"],
        "submitted_at": doc["submitted_at_iso"],
        "submitted_age_s": round(max(now_ms - doc["submitted_at"], 0) / 1000, 1),
        # A live run's time so far; an ended one's from submission to its last change.
        "elapsed_s": round(max((doc["updated_at"] if doc["terminal"] else now_ms)
                               - doc["submitted_at"], 0) / 1000, 1),
        "updated_age_s": round(max(now_ms - doc["updated_at"], 0) / 1000, 1),
        "href": f"/runs/{quote(doc['run_id'], safe='')}",
    }


def shown(docs: Iterable[Mapping[str, Any]], recent_ended: int = RECENT_ENDED
          ) -> tuple[list[Mapping[str, Any]], int]:
    """The runs the table shows, in its order: live runs first (newest submission
    first), then the ``recent_ended`` that changed last; and how many ended runs it
    leaves out."""
    live: list[Mapping[str, Any]] = []
    ended: list[Mapping[str, Any]] = []
    for d in docs:
        (ended if d["terminal"] else live).append(d)
    live.sort(key=lambda d: (-d["submitted_at"], d["run_id"]))
    ended.sort(key=lambda d: (-d["updated_at"], d["run_id"]))
    return [*live, *ended[:recent_ended]], max(len(ended) - recent_ended, 0)


def runs_table(docs: Iterable[Mapping[str, Any]], ettr: Mapping[str, float],
               steps: Mapping[str, int], now_ms: int,
               recent_ended: int = RECENT_ENDED) -> dict[str, Any]:
    """The :func:`shown` runs as rows, with the count of every run by state."""
    every = list(docs)
    rows, left_out = shown(every, recent_ended)
    counts: dict[str, int] = {}
    for d in every:
        counts[d["state"]] = counts.get(d["state"], 0) + 1
    return {"runs": [run_row(d, ettr.get(d["run_id"]), steps.get(d["run_id"]), now_ms)
                     for d in rows],
            "by_state": dict(sorted(counts.items())), "ended_left_out": left_out}


def failures(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every failure the summary keeps, newest first, with its last lines and its log."""
    out = []
    for f in reversed(doc.get("failure_history") or []):
        out.append({**f, "log_href": _log_link(doc["run_id"], f.get("generation"),
                                               f.get("logical_id"))})
    return out


def members(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The current generation's members, rank order, each with a link to its output."""
    return [{"rank": i, "logical_id": m["logical_id"], "node": m["node"], "slot": m["slot"],
             "domain": m["domain"],
             "log_href": _log_link(doc["run_id"], doc["generation"], m["logical_id"]),
             "node_href": f"/nodes#{quote(m['node'], safe='')}"}
            for i, m in enumerate(doc.get("members") or [])]


def latest_step(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The newest step the projection has: its loss, step time and throughput."""
    if row is None:
        return None
    ms = row.get("step_time_ms")
    rate = row["tokens"] / (ms / 1000) if ms else None
    return {"step": row["step"], "generation": row["generation"], "loss": row.get("loss"),
            "step_time_ms": ms, "input_wait_ms": row.get("input_wait_ms"),
            "tokens_per_s": None if rate is None else round(rate, 1)}


def run_page(doc: Mapping[str, Any], projected_step: int | None,
             ettr: Mapping[str, Any] | None, alerts: Sequence[Mapping[str, Any]],
             now_ms: int, latest: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The live part of a run's page: what ``runledger.status`` says, now, and the
    newest step row of the projection (``latest``)."""
    return {
        "latest": latest_step(latest),
        "run": run_row(doc, None if ettr is None else ettr.get("ratio"), projected_step,
                       now_ms),
        "members": members(doc), "failures": failures(doc),
        "checkpoint": doc.get("checkpoint"), "cursor": doc.get("cursor"),
        "queue_reason": doc.get("queue_reason") or None,
        "outcome_reason": doc.get("outcome_reason") or None,
        "cancel_requested": doc.get("cancel_requested", False),
        "retry_not_before": doc.get("retry_not_before"),
        "ettr": ettr, "alerts": [alert_row(a) for a in alerts],
    }


def alert_row(a: Mapping[str, Any]) -> dict[str, Any]:
    """An alert with a link to its runbook section (``docs/runbooks.md``'s anchors)."""
    runbook = a.get("runbook") or ""
    anchor = runbook.split("#", 1)[1] if "#" in runbook else None
    if runbook.startswith(("https://", "http://")):  # a team's own runbook base
        href: str | None = runbook
    else:
        href = f"/runbooks#{anchor}" if anchor else None
    return {"alert": a.get("alert"), "severity": a.get("severity"),
            "subject": a.get("subject"), "detail": a.get("detail"), "value": a.get("value"),
            "threshold": a.get("threshold"), "open": a.get("resolved_at") is None,
            "runbook": runbook or None,
            "runbook_href": href}


def nodes_table(rows: Sequence[Mapping[str, Any]], docs: Iterable[Mapping[str, Any]]
                ) -> list[dict[str, Any]]:
    """``runledger nodes``' rows, each with the live runs that have a member on it."""
    on: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        if d["terminal"]:
            continue
        for m in d.get("members") or []:
            runs = on.setdefault(m["node"], [])
            if all(r["run_id"] != d["run_id"] for r in runs):
                runs.append({"run_id": d["run_id"], "name": d["name"],
                             "href": f"/runs/{quote(d['run_id'], safe='')}"})
    return [{**r, "runs": on.get(r["node"], [])} for r in rows]


__all__ = ["alert_row", "failures", "members", "nodes_table", "progress", "run_page",
           "run_row", "runs_table", "shown"]

"""``runledger query recovery RUN``: RPO and RTO per failure domain over time.

``recovery.sql`` lists the run's facts in log order; :func:`recovery` folds them
through ``events.recovery`` (the functions the controller's ``rpo_violated``
alert folds the live log through) and writes a row for a domain at each fact
where that domain's recoverable step or violation changed, plus a row per
domain for the latest fact (where the run stands now). The rows carry the
domain's incidents so far and the RTO of the newest (``incidents.sql``): a
failure's domain is ``events.recovery.domain_of`` its class
(``infrastructure``: host; every other class: process), and a failure's row
names the node it was attributed to (``node``: for a lost node,
``infrastructure:node_lost``, the node that was lost).

The spec's ``checkpoint.rpo`` and first tier come from the submitted spec JSON
(the controller validated it at submit): the first tier's widest ``protects``,
or ``host`` for a lone ``checkpoint.root``.

Tested in tests/queries/test_recovery.py.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from events import recovery as rv
from events.workerenv import FAILURE_DOMAINS
from queries.runner import Result, run_query

COLUMNS = ["at", "event_type", "domain", "committed_step", "recoverable_step",
           "rpo_steps", "rpo_s", "rpo_target_steps", "violated", "incidents", "rto_s", "node"]


def targets(spec_json: str | None) -> tuple[str, dict[str, int]]:
    """(the first tier's widest protected domain, checkpoint.rpo) of a submitted spec."""
    try:
        doc = json.loads(spec_json or "{}")
    except ValueError:
        doc = {}
    ckpt = doc.get("checkpoint") if isinstance(doc, dict) else None
    ckpt = ckpt if isinstance(ckpt, dict) else {}
    tiers = ckpt.get("tiers") or []
    first = "host"
    if tiers and isinstance(tiers[0], dict):
        listed = [d for d in tiers[0].get("protects") or [] if d in FAILURE_DOMAINS]
        first = max(listed, key=FAILURE_DOMAINS.index, default="process")
    rpo = ckpt.get("rpo") or {}
    return first, {str(d): int(n) for d, n in rpo.items() if d in FAILURE_DOMAINS}


@dataclass
class _Series:
    """The fold and the rows written so far (one query's working state)."""

    first: str = "host"
    rpo: dict[str, int] = field(default_factory=dict)
    rec: rv.Recovery = rv.EMPTY
    shown: dict[str, tuple[int | None, bool]] = field(default_factory=dict)
    incidents: dict[str, list[float | None]] = field(default_factory=dict)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    written: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # per domain, its last

    def take(self, f: Mapping[str, Any], rto: list[dict[str, Any]]) -> bool:
        """Fold one fact; whether it is a point of the series."""
        kind, eid = f["event_type"], f["event_id"]
        if kind == "RunSubmitted":
            self.first, self.rpo = targets(f["spec_json"])
        elif kind == "StepCommitted":
            self.rec = rv.stepped(self.rec, f["step"], f["occurred_at"], f["step_time_ms"] or 0)
            return self._crossed()
        elif kind == "GenerationStarted":
            self.rec = rv.restarted(self.rec, f["resume_step"] or 0, eid)
        elif kind == "ManifestCommitted":
            self.rec = rv.committed(self.rec, f["step"], f["manifest_digest"],
                                    f["occurred_at"], eid)
        elif kind == "CheckpointReplicated":
            self.rec = rv.replicated(self.rec, f["manifest_digest"], f["protects"], eid)
        elif kind == "CheckpointRevoked":
            self.rec = rv.revoked(self.rec, f["manifest_digest"], eid)
        elif kind == "FailureClassified":
            match = next((i for i, r in enumerate(rto) if r["signature"] == f["signature"]
                          and r["failure_class"] == f["failure_class"]), None)
            seconds = rto.pop(match)["rto_s"] if match is not None else None
            domain = rv.domain_of(f["failure_class"])
            self.incidents.setdefault(domain, []).append(seconds)
        return bool(kind != "RunSubmitted")

    def _crossed(self) -> bool:
        """Whether a step moved a domain across its rpo: a point, at most one per episode.

        Only the step moved, so each domain's recoverable step is the one last shown:
        O(domains) per step, not a fold of the checkpoints.
        """
        for domain, target in self.rpo.items():
            shown = self.shown.get(domain)
            if shown is not None and (self.rec.step - (shown[0] or 0) > target) != shown[1]:
                return True
        return False

    def point(self, f: Mapping[str, Any], every: bool) -> None:
        """The rows of one point: the domains that changed (``every``: all of them)."""
        for fig in rv.figures(self.rec, self.first, self.rpo):
            now = (fig.recoverable_step, fig.violated)
            seen = self.incidents.get(fig.domain, [])
            failed = f["event_type"] == "FailureClassified" \
                and rv.domain_of(f["failure_class"]) == fig.domain
            if not every and self.shown.get(fig.domain) == now and not failed:
                continue
            self.shown[fig.domain] = now
            row = (_utc(f["occurred_at"]), f["event_type"], fig.domain, fig.committed_step,
                   fig.recoverable_step, fig.gap_steps, fig.gap_s, fig.rpo_steps,
                   fig.violated, len(seen), seen[-1] if seen else None,
                   f["node"] if failed else None)
            if self.written.get(fig.domain) != row:  # the last point may repeat the latest
                self.written[fig.domain] = row
                self.rows.append(row)


def recovery(con: duckdb.DuckDBPyConnection, run_id: str) -> Result:
    """The series (module docstring); a run with no facts to show has no rows."""
    facts = run_query(con, "recovery", run_id).records()
    rto = run_query(con, "incidents", run_id).records()
    series = _Series()
    last: dict[str, Any] | None = None
    for f in facts:
        if series.take(f, rto):
            series.point(f, every=False)
        if f["event_type"] != "RunSubmitted":
            last = f
    if last is not None:
        series.point(last, every=True)
    return Result("recovery", run_id, list(COLUMNS), series.rows)


def _utc(ms: int) -> dt.datetime:
    """Epoch ms as the naive UTC datetime DuckDB's epoch_ms() gives the other queries."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).replace(tzinfo=None)


def latest(result: Result) -> list[dict[str, Any]]:
    """The newest row per domain, narrowest domain first (where the run stands)."""
    newest = {r["domain"]: r for r in result.records()}
    return [newest[d] for d in FAILURE_DOMAINS if d in newest]

"""The report's "Silent data corruption" section, as HTML and as text.

Detector coverage comes from the run spec's ``sdc`` section (the one the
controller hands the workers as ``RUNLEDGER_SDC``, read here through the same
``events.sdcenv.SdcEnv``; no section: no detector at all);
suspicions, verdicts and rollbacks from the ``incidents`` rows that carry an
``sdc_detector``. Both forms are pure functions of the gathered data.

Tested in tests/queries/test_report_sdc.py.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from events.errors import InvalidEvent
from events.sdc import SDC_DETECTORS, SDC_VERDICTS
from events.sdcenv import SdcEnv
from queries.report_html import Col, Safe, empty, esc, facts, num, since, table

Rows = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Coverage:
    """Whether one detector ran, and how (``how`` says "off" when it did not)."""

    detector: str
    on: bool
    how: str


def coverage(sdc_json: str | None) -> tuple[list[Coverage], str | None]:
    """Per detector of ``SDC_DETECTORS``, from the spec's ``sdc`` section as JSON text
    (None: the spec has none). The second item says why a section could not be read
    (the controller checks the spec at submission, so only a foreign log has one);
    the coverage shown is then the defaults'."""
    if sdc_json is None:
        return _rows(OFF), None
    try:
        return _rows(spec_env(json.loads(sdc_json))), None
    except (ValueError, TypeError, InvalidEvent) as exc:
        return _rows(SdcEnv()), (f"the spec's sdc section {sdc_json} could not be read"
                                 f" ({exc}); shown: the defaults")


# What a spec without the section (or with ``sdc:`` and nothing under it) runs: nothing.
OFF = SdcEnv(nonfinite=False)
_AGREEMENT = {"every", "full_every", "grads", "optimizer"}
_INVARIANTS = {"nonfinite", "spike_sigma", "window", "warmup"}


def spec_env(doc: Any) -> SdcEnv:
    """What ``controller.spec.sdc.sdc_env`` makes of a spec's ``sdc`` section (the
    queries may not import the controller): ``agreement`` absent is off, present its
    ``every`` defaults to 1; ``invariants`` absent are the defaults. TypeError or
    InvalidEvent for a section that is not one."""
    if doc is None:  # `sdc:` with nothing under it: the spec parses it as no section
        return OFF
    _check(doc, "sdc", {"agreement", "invariants"})
    agreement, invariants = doc.get("agreement"), doc.get("invariants") or {}
    _check(invariants, "sdc.invariants", _INVARIANTS)
    if agreement is not None:
        _check(agreement, "sdc.agreement", _AGREEMENT)
    a, i, d = agreement or {}, invariants, SdcEnv()
    return SdcEnv(agreement_every=0 if agreement is None else a.get("every", 1),
                  full_every=a.get("full_every", 0), grads=a.get("grads", True),
                  optimizer=a.get("optimizer", True), nonfinite=i.get("nonfinite", True),
                  spike_sigma=i.get("spike_sigma", 0.0),
                  spike_window=i.get("window", d.spike_window),
                  spike_warmup=i.get("warmup", d.spike_warmup))


def _check(doc: Any, where: str, known: set[str]) -> None:
    if not isinstance(doc, dict):
        raise TypeError(f"{where} must be a mapping, got {doc!r}")
    unknown = sorted(set(doc) - known)
    if unknown:
        raise TypeError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")


def _rows(env: SdcEnv) -> list[Coverage]:
    state = ", ".join(["parameters", *(["gradients"] if env.grads else []),
                       *(["optimizer state"] if env.optimizer else [])])
    every = env.agreement_every
    return [
        Coverage("agreement", every > 0, f"fingerprint of {state} across replicas every "
                 f"{_steps(every)}" if every else "off"),
        Coverage("digest", env.full_every > 0,
                 f"full sha256 digest every {_steps(env.full_every)}"
                 if env.full_every else "off"),
        Coverage("nonfinite", env.nonfinite,
                 "loss and gradient norm, every step" if env.nonfinite else "off"),
        Coverage("spike", env.spike_sigma > 0,
                 f"above median + {env.spike_sigma:g} x 1.4826 x MAD of the last "
                 f"{env.spike_window} steps, after {env.spike_warmup}"
                 if env.spike_sigma > 0 else "off"),
    ]


def _steps(n: int) -> str:
    return "step" if n == 1 else f"{n:,} steps"


def suspicions(incidents: Rows) -> Rows:
    """The incidents that are suspicions, in log order."""
    return [r for r in incidents if r.get("sdc_detector") is not None]


def tallies(rows: Rows) -> tuple[dict[str, int], dict[str, int]]:
    """Suspicions by detector and verdicts by verdict (an open suspicion: ``open``)."""
    by_detector = Counter(r["sdc_detector"] for r in rows)
    by_verdict = Counter(r["verdict"] or "open" for r in rows)
    return ({d: by_detector[d] for d in SDC_DETECTORS if by_detector[d]},
            {v: by_verdict[v] for v in (*SDC_VERDICTS, "open") if by_verdict[v]})


def _list(value: Any) -> str:
    """A JSON list column as ``a, b``; ``[]`` of ranks means every rank."""
    items = json.loads(value) if isinstance(value, str) else (value or [])
    return ", ".join(str(i) for i in items) if items else "all"


def _rollback(r: dict[str, Any]) -> str:
    step = r.get("rollback_step")
    if step is None:
        return "-"
    return "the start" if step == 0 and r.get("rollback_manifest") is None else f"step {step:,}"


def _tally_text(counts: dict[str, int]) -> str:
    return " · ".join(f"{k} {n:,}" for k, n in counts.items()) or "none"


def html_section(sdc_json: str | None, incidents: Rows, origin_ms: int | None) -> str:
    """The ``<section id="sdc">``: coverage table, tallies, then one row per suspicion."""
    cover, problem = coverage(sdc_json)
    ctab = table([Col("detector", "detector"), Col("state", "state"), Col("how", "how")],
                 [{"detector": c.detector, "state": "on" if c.on else "off", "how": c.how}
                  for c in cover], table_id="sdc-coverage",
                 row_attrs=lambda r: {"data-detector": r["detector"]})
    note = f'<p class="note" id="sdc-problem">{esc(problem)}</p>' if problem else ""
    rows = suspicions(incidents)
    by_detector, by_verdict = tallies(rows)
    tally = facts([("suspicions", num(len(rows))), ("by detector", _tally_text(by_detector)),
                   ("verdicts", _tally_text(by_verdict)),
                   ("steps trained again", num(sum(r["steps_lost"] or 0 for r in rows)))],
                  dl_id="sdc-facts")
    if not rows:
        listing = empty("no suspicions")
    else:
        cols = [Col("generation", "gen", num, True),
                Col("fault_at", "at", lambda v: since(v, origin_ms), True),
                Col("sdc_detector", "detector"), Col("sdc_step", "step", num, True),
                Col("sdc_ranks", "ranks", _list), Col("sdc_nodes", "nodes", _list),
                Col("verdict", "verdict", lambda v: Safe(
                    f'<span class="badge {esc(v or "open")}">{esc(v or "open")}</span>')),
                Col("rollback", "rolled back to"),
                Col("revoked_checkpoints", "revoked", num, True),
                Col("steps_lost", "steps lost", num, True), Col("verdict_detail", "detail")]
        listing = table(cols, [{**r, "rollback": _rollback(r)} for r in rows],
                        table_id="sdc-table",
                        row_attrs=lambda r: {"data-generation": r["generation"],
                                             "data-step": r["sdc_step"]})
    return (f'<section id="sdc"><h2>Silent data corruption <small>detectors the spec enabled;'
            " each suspicion, its verdict by replay and the rollback it caused</small></h2>"
            f"{ctab}{note}{tally}{listing}</section>")


def text_section(sdc_json: str | None, incidents: Rows) -> str:
    """The same section as plain text for a terminal."""
    cover, problem = coverage(sdc_json)
    out = ["Silent data corruption", "", "detector coverage:"]
    width = max(len(c.detector) for c in cover)
    out += [f"  {c.detector.ljust(width)}  {'on ' if c.on else 'off'}  {c.how if c.on else ''}"
            .rstrip() for c in cover]
    if problem:
        out.append(f"  ({problem})")
    rows = suspicions(incidents)
    by_detector, by_verdict = tallies(rows)
    out += ["", f"suspicions: {len(rows):,} ({_tally_text(by_detector)});"
            f" verdicts: {_tally_text(by_verdict)}"]
    for r in rows:
        out.append(f"  g{r['generation']} step {r['sdc_step']:,}: {r['sdc_detector']}"
                   f" on ranks {_list(r['sdc_ranks'])} (nodes {_list(r['sdc_nodes'])});"
                   f" verdict {r['verdict'] or 'open'}; rolled back to {_rollback(r)},"
                   f" {r['revoked_checkpoints'] or 0} checkpoint(s) revoked,"
                   f" {r['steps_lost'] or 0} step(s) trained again")
    return "\n".join(out) + "\n"

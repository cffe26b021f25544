"""Alert rules: when the controller raises or resolves an alert for a run.

Pure (time comes from ``now`` and the events). Only the controller writes
``runledger.runs``, so it evaluates the rules and appends the alert facts.

- ``controller.watch.Watch``: what the rules look at beyond the folded state,
  one per run in the controller's model.
- :class:`AlertConfig`: one run's thresholds, owner and runbook (``RunPlan.alerts``).
- :func:`evaluate`: the rules, as raise/resolve :class:`Decision` values,
  deduplicated against the fold's ``RunState.open_alerts``.
- :func:`facts`: decisions as events with deterministic ids: ``<run>/alert/<key>/<n>``
  (``n``: earlier raises of that key) and ``<that id>/resolved``; a rule whose
  action is ``escalate`` (``AlertConfig.actions``) is raised one severity higher,
  addressed to ``escalate_to``, and says so in its detail.

A rule that lacks evidence (too few samples, no mixture targets, a run that is
not Running) decides nothing: an open alert stays open until evidence clears
it, or until the run ends, which resolves every open alert of the run.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from controller.watch import Watch
from events.model import AlertRaised, AlertResolved, Header, alert_key
from events.recovery import figure, widest_index
from events.state import RunState, Status

PROGRESS_STALL = "progress_stall"
STRAGGLER_RANK = "straggler_rank"
INPUT_WAIT_SHARE = "input_wait_share"
CHECKPOINT_LAG = "checkpoint_lag"
MIXTURE_DRIFT = "mixture_drift"
NON_FINITE_LOSS = "non_finite_loss"
REPEATED_FAILURE = "repeated_failure"
RPO_VIOLATED = "rpo_violated"
ALERTS = (PROGRESS_STALL, STRAGGLER_RANK, INPUT_WAIT_SHARE, CHECKPOINT_LAG, MIXTURE_DRIFT,
          NON_FINITE_LOSS, REPEATED_FAILURE, RPO_VIOLATED)
SEVERITY = {a: "critical" if a in (NON_FINITE_LOSS, REPEATED_FAILURE) else "warning"
            for a in ALERTS}

# Defaults, shared with the spec's ``alerts:`` section (controller.spec.parts).
DEFAULT_RUNBOOK_BASE = "docs/runbooks.md"
DEFAULT_PROGRESS_STALL_MS = 30_000  # half the default heartbeat.stall_timeout_s
DEFAULT_WINDOW_STEPS = 16
DEFAULT_STRAGGLER_RATIO = 1.5
DEFAULT_INPUT_WAIT_SHARE = 0.25
DEFAULT_LAG_INTERVALS = 3
DEFAULT_MIXTURE_DRIFT = 0.02
DEFAULT_REPEATED_FAILURE = 2
MIN_SAMPLES = 4  # per rank (stragglers) and per run (input wait) before a verdict
# A straggler is also this much slower than the others, not only straggler_ratio times:
# steps of a few ms jitter past any ratio (a 4-step run of 25 ms steps raised one),
# while a real straggler of a real job (steps of 100 ms and more) clears it easily.
MIN_STRAGGLER_GAP_MS = 50.0

RAISE = "raise"
RESOLVE = "resolve"

# What a raised alert does beyond being a fact (the spec's ``alerts.actions``):
# ``notify`` only records it; ``escalate`` records it one severity higher and
# addressed to ``alerts.escalate_to``; ``pause`` stops and holds the run
# (:func:`pausing`, performed by ``controller.reconcile``).
NOTIFY = "notify"
ESCALATE = "escalate"
PAUSE = "pause"
ACTIONS = (NOTIFY, PAUSE, ESCALATE)
_SEVERITY_ORDER = ("info", "warning", "critical")


def runbook_of(base: str, alert: str) -> str:
    return f"{base}#{alert.replace('_', '-')}"


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """One run's alert settings as plain values (``RunPlan.alerts``)."""

    owner: str | None = None  # None: the run's submitting principal
    runbook_base: str = DEFAULT_RUNBOOK_BASE
    progress_stall_ms: int = DEFAULT_PROGRESS_STALL_MS
    window_steps: int = DEFAULT_WINDOW_STEPS
    straggler_ratio: float = DEFAULT_STRAGGLER_RATIO
    input_wait_share: float = DEFAULT_INPUT_WAIT_SHARE
    # None: DEFAULT_LAG_INTERVALS x the current interval (the controller's, else the spec's).
    checkpoint_lag_steps: int | None = None
    plan_interval_steps: int | None = None
    mixture_drift: float = DEFAULT_MIXTURE_DRIFT
    repeated_failure: int = DEFAULT_REPEATED_FAILURE
    # checkpoint.rpo: the most steps a loss of each failure domain may cost, and the
    # widest domain the first tier's copy survives (its commit counts for those).
    rpo: Mapping[str, int] = field(default_factory=dict)
    first_protects: str = "host"
    # alerts.actions: per rule, NOTIFY (the default) or ESCALATE; and who an escalation
    # is addressed to (None: the owner, one severity higher).
    actions: Mapping[str, str] = field(default_factory=dict)
    escalate_to: str | None = None


def escalated(severity: str) -> str:
    """One severity higher (critical stays critical)."""
    i = _SEVERITY_ORDER.index(severity) if severity in _SEVERITY_ORDER else 0
    return _SEVERITY_ORDER[min(i + 1, len(_SEVERITY_ORDER) - 1)]


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # RAISE or RESOLVE
    alert: str
    subject: str
    severity: str
    threshold: str
    value: float | None
    detail: str
    cause: str | None = None  # the event that is the evidence, for causation_id

    @property
    def key(self) -> str:
        return alert_key(self.alert, self.subject)


def evaluate(state: RunState, plan_alerts: AlertConfig, watch: Watch, now: int,
             since: int = 0) -> list[Decision]:
    """Raise what fires and is not open; resolve what is open and clear (or the run ended).

    ``since``: when this controller began listening; stalls count from then at
    the earliest, as the controller's own stall check does.
    """
    if state.status.terminal:
        return _close_all(state, watch)
    return [*_progress_stall(state, plan_alerts, watch, now, since),
            *_stragglers(state, plan_alerts, watch), *_input_wait(state, plan_alerts, watch),
            *_checkpoint_lag(state, plan_alerts, watch), *_mixture_drift(state, plan_alerts, watch),
            *_non_finite_loss(state, watch), *_repeated_failure(state, plan_alerts, watch),
            *_rpo_violated(state, plan_alerts, watch)]


def _moot(state: RunState, alert: str, subject: str, firing: bool) -> bool:
    """Whether a verdict changes nothing (firing and open, or clear and closed).

    Each rule yields a decision only where it changes something, and asks this
    before writing any detail, which a thousand-rank run would pay every tick.
    """
    return firing == (alert_key(alert, subject) in state.open_alerts)


def _decide(alert: str, subject: str, firing: bool, threshold: str, value: float | None,
            detail: str, cause: str | None) -> Decision:
    return Decision(RAISE if firing else RESOLVE, alert, subject, SEVERITY[alert], threshold,
                    value, detail if firing else f"cleared: {detail}", cause)


def _progress_stall(state: RunState, cfg: AlertConfig, watch: Watch, now: int,
                    since: int) -> Iterator[Decision]:
    # Like the controller's own stall check: once a member has exited the group
    # is finishing (or failing), and no step is expected.
    if state.status != Status.RUNNING or state.exits:
        return
    idle_ms = now - max(state.last_progress_at, since)
    limit = cfg.progress_stall_ms
    if _moot(state, PROGRESS_STALL, "", firing := idle_ms > limit):
        return
    detail = (f"no step after step {state.step} for {idle_ms / 1000:.1f} s (the controller"
              " fails the run as hung at its stall timeout)" if firing else
              f"step {state.step} was {idle_ms / 1000:.1f} s ago")
    yield _decide(PROGRESS_STALL, "", firing, f"> {limit / 1000:g} s without a step",
                  idle_ms / 1000, detail, watch.steps[-1].event_id if watch.steps else None)


def _median_without(ordered: list[float], i: int) -> float:
    """The median of ``ordered`` (sorted) without its ``i``-th element, in O(1)."""
    n = len(ordered) - 1

    def at(j: int) -> float:
        return ordered[j] if j < i else ordered[j + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def _stragglers(state: RunState, cfg: AlertConfig, watch: Watch) -> Iterator[Decision]:
    medians = {lid: statistics.median(r.times[-cfg.window_steps:])
               for lid, r in watch.ranks.items() if len(r.times) >= MIN_SAMPLES}
    if len(medians) < 2:
        return
    ordered = sorted(medians.values())
    for lid in sorted(medians):
        mine = medians[lid]
        # The other ranks' median, as `runledger query stragglers` computes it: with
        # all ranks', a 2-rank run could never have a straggler above 1.33x.
        others = _median_without(ordered, bisect.bisect_left(ordered, mine))
        ratio = mine / others if others > 0 else 0.0
        slow = ratio > cfg.straggler_ratio and mine - others >= MIN_STRAGGLER_GAP_MS
        if others <= 0 or _moot(state, STRAGGLER_RANK, lid, firing := slow):
            continue
        n = min(len(watch.ranks[lid].times), cfg.window_steps)
        yield _decide(STRAGGLER_RANK, lid, firing,
                      f"> {cfg.straggler_ratio:g}x the other ranks' median step time",
                      round(ratio, 4), f"{lid}: median step time {mine:.1f} ms over its last {n}"
                      f" steps is {ratio:.2f}x the other ranks' median {others:.1f} ms",
                      watch.ranks[lid].event_id)


def _input_wait(state: RunState, cfg: AlertConfig, watch: Watch) -> Iterator[Decision]:
    recent = watch.steps[-cfg.window_steps:]
    total = sum(s.step_time_ms for s in recent)
    if len(recent) < MIN_SAMPLES or total <= 0:
        return
    share = sum(s.input_wait_ms for s in recent) / total
    if _moot(state, INPUT_WAIT_SHARE, "", firing := share > cfg.input_wait_share):
        return
    yield _decide(INPUT_WAIT_SHARE, "", firing,
                  f"> {cfg.input_wait_share:g} of step time waiting for input", round(share, 4),
                  f"{share:.1%} of the step time of steps {recent[0].step}..{recent[-1].step}"
                  " was spent waiting for input", recent[-1].event_id)


def _checkpoint_lag(state: RunState, cfg: AlertConfig, watch: Watch) -> Iterator[Decision]:
    interval = state.checkpoint_interval_steps or cfg.plan_interval_steps
    limit = cfg.checkpoint_lag_steps or (DEFAULT_LAG_INTERVALS * interval if interval else None)
    if not state.status.active or limit is None:
        return
    durable = state.checkpoint.step if state.checkpoint else 0
    lag = state.step - durable
    if _moot(state, CHECKPOINT_LAG, "", firing := lag > limit):
        return
    staged = (f"; last staged step {watch.staged[0]}, durable step {watch.staged[1]}"
              if watch.staged else "; nothing staged yet")
    cause = (watch.steps[-1].event_id if watch.steps else None) if firing else watch.commit_id
    yield _decide(CHECKPOINT_LAG, "", firing, f"> {limit} steps not yet durable", float(lag),
                  f"step {state.step}, latest committed checkpoint at step {durable}: {lag} steps"
                  f" would be lost by a failure now{staged}", cause)


def _mixture_drift(state: RunState, cfg: AlertConfig, watch: Watch) -> Iterator[Decision]:
    mix = watch.mixture
    n = sum(mix.counts.values()) if mix else 0
    if mix is None or not mix.targets or n <= 0:
        return
    sources = sorted(set(mix.targets) | set(mix.counts))
    dev, worst = max((abs(mix.counts.get(s, 0) - mix.targets.get(s, 0.0) * n), s)
                     for s in sources)
    drift = dev / n
    # Within one unit of a target is the rounding an exact-quota mixer carries: not drift.
    if _moot(state, MIXTURE_DRIFT, "", firing := drift > cfg.mixture_drift and dev > 1.0):
        return
    yield _decide(MIXTURE_DRIFT, "", firing,
                  f"> {cfg.mixture_drift:g} of the samples off a source's target", round(drift, 6),
                  f"at step {mix.step} source {worst!r} has {mix.counts.get(worst, 0)} of {n}"
                  f" samples, target {mix.targets.get(worst, 0.0) * n:.1f} (drift {drift:.2%})",
                  mix.event_id)


def _non_finite_loss(state: RunState, watch: Watch) -> Iterator[Decision]:
    last = next((s for s in reversed(watch.steps) if s.loss is not None), None)
    if last is None or last.loss is None:
        return
    if _moot(state, NON_FINITE_LOSS, "", firing := not math.isfinite(last.loss)):
        return
    yield _decide(NON_FINITE_LOSS, "", firing, "loss is NaN or infinite", None,
                  f"loss {last.loss} at step {last.step}", last.event_id)


def _repeated_failure(state: RunState, cfg: AlertConfig, watch: Watch) -> Iterator[Decision]:
    ckpt = state.checkpoint
    for sig in sorted(state.failures):
        count, seen = state.failures[sig], watch.failures.get(sig)
        # A checkpoint committed by a later generation than the last such failure:
        # the run got past it.
        healed = seen is not None and ckpt is not None and ckpt.generation > seen.generation
        if _moot(state, REPEATED_FAILURE, sig, firing := count >= cfg.repeated_failure
                 and not healed):
            continue
        detail = (f"{sig} classified {count} times; the last in generation "
                  f"{seen.generation if seen else '?'}")
        if healed and ckpt is not None:
            detail += f"; generation {ckpt.generation} has since committed step {ckpt.step}"
        yield _decide(REPEATED_FAILURE, sig, firing,
                      f">= {cfg.repeated_failure} failures with the same signature", float(count),
                      detail, watch.commit_id if healed else (seen.event_id if seen else None))


def _rpo_violated(state: RunState, cfg: AlertConfig, watch: Watch) -> Iterator[Decision]:
    """One alert per failure domain whose gap exceeds its ``checkpoint.rpo``.

    Judged while the run is active, like the checkpoint lag: a run waiting for
    its next generation has no committed progress to lose.
    """
    if not state.status.active or not cfg.rpo:
        return
    rec = watch.recovery
    for domain in sorted(cfg.rpo, key=widest_index):
        f = figure(rec, domain, cfg.first_protects, cfg.rpo)
        if _moot(state, RPO_VIOLATED, domain, firing := f.violated):
            continue
        survives = ("no checkpoint survives it" if f.recoverable_step is None else
                    f"the newest checkpoint that survives it is at step {f.recoverable_step}")
        seconds = "" if f.gap_s is None else f" ({f.gap_s:.1f} s of training)"
        advice = (f"; replicate more often (a shorter checkpoint interval or a faster tier)"
                  f" or add a tier that protects {domain}" if firing else "")
        yield _decide(RPO_VIOLATED, domain, firing,
                      f"> {f.rpo_steps} steps lost by a {domain} loss", float(f.gap_steps),
                      f"a {domain} loss at step {f.committed_step} would cost {f.gap_steps}"
                      f" steps{seconds}, over the rpo of {f.rpo_steps}: {survives}{advice}",
                      (watch.steps[-1].event_id if watch.steps else None) if firing
                      else rec.changed_by)


def _close_all(state: RunState, watch: Watch) -> list[Decision]:
    why = f"the run ended: {state.status.value}" + (
        f" ({state.outcome_reason})" if state.outcome_reason else "")
    split = (key.partition("/") for key in sorted(state.open_alerts))
    return [Decision(RESOLVE, alert, subject, SEVERITY.get(alert, "warning"), "", None, why,
                     watch.ended_by) for alert, _, subject in split]


def facts(state: RunState, plan_alerts: AlertConfig, watch: Watch, now: int, producer: str,
          since: int = 0) -> list[AlertRaised | AlertResolved]:
    """The alert facts to append for ``state``, in the run's current generation."""
    if state.status.terminal and not state.open_alerts:
        return []  # the common case for every ended run at every tick
    owner = plan_alerts.owner or state.principal
    out: list[AlertRaised | AlertResolved] = []
    for d in evaluate(state, plan_alerts, watch, now, since):
        raised = state.open_alerts.get(d.key, "")
        eid = (f"{state.run_id}/alert/{d.key}/{watch.raised.get(d.key, 0)}" if d.action == RAISE
               else f"{raised}/resolved")
        h = Header(eid, state.run_id, state.generation, now, producer, d.cause)
        action = plan_alerts.actions.get(d.alert, NOTIFY)
        up = action == ESCALATE
        tag = {ESCALATE: "escalated", PAUSE: "pausing the run"}.get(action)
        out.append(AlertRaised(
            header=h, alert=d.alert, severity=escalated(d.severity) if up else d.severity,
            owner=(plan_alerts.escalate_to or owner) if up else owner,
            runbook=runbook_of(plan_alerts.runbook_base, d.alert),
            detail=f"{d.detail} [{tag}: alerts.actions.{d.alert}]" if tag else d.detail,
            subject=d.subject, threshold=d.threshold, value=d.value) if d.action == RAISE else
            AlertResolved(header=h, alert=d.alert, subject=d.subject, raised_event_id=raised,
                          detail=d.detail))
    return out


def pausing(raised: list[AlertRaised | AlertResolved], plan_alerts: AlertConfig,
            state: RunState) -> AlertRaised | None:
    """The first alert just raised whose rule's action is ``pause``, if the run has a
    live generation to pause; else None.

    On the raise, not while the alert is open: a run resumed while its alert is
    still open is paused again only once the alert has cleared and fires again
    (a restored generation's first finite loss clears ``non_finite_loss``).
    """
    if not state.status.active or state.paused:
        return None
    return next((f for f in raised if isinstance(f, AlertRaised)
                 and plan_alerts.actions.get(f.alert) == PAUSE), None)

"""RPO per failure domain (events.recovery): worked cases and properties over generated
histories, checked against an oracle that reads the whole history backwards."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from events.model import (
    CheckpointReplicated,
    CheckpointRevoked,
    Event,
    GenerationStarted,
    ManifestCommitted,
    StepCommitted,
)
from events.recovery import (
    EMPTY,
    Recovery,
    domain_of,
    figure,
    figures,
    observe,
)
from events.state import Checkpoint
from events.workerenv import FAILURE_DOMAINS
from tests.events.builders import Ev


def fold(events: Sequence[Event]) -> Recovery:
    rec = EMPTY
    for e in events:
        rec = observe(rec, e)
    return rec


def ckpt(e: ManifestCommitted) -> Checkpoint:
    return Checkpoint(e.step, e.manifest_path, e.manifest_digest, e.generation,
                      e.header.occurred_at)


def test_a_local_commit_protects_the_process_and_a_replica_the_wider_domains() -> None:
    ev = Ev(tick=1000)
    log: list[Event] = [ev.generation_started(1)]
    log += [ev.step(1, s, step_time_ms=1000.0) for s in range(1, 11)]
    c10 = ev.committed(1, 10, at=ev.now)  # at step 10's end: the clock does not move
    log += [c10, *(ev.step(1, s) for s in range(11, 16))]
    rec = fold(log)
    got = {f.domain: f for f in figures(rec, "process", {"process": 5, "host": 8})}
    assert (got["process"].recoverable_step, got["process"].gap_steps) == (10, 5)
    assert not got["process"].violated
    # Steps 1..15 a second apart: nothing survives a host loss, 15 s of training.
    assert (got["host"].recoverable_step, got["host"].gap_steps) == (None, 15)
    assert got["host"].gap_s == 15.0 and got["host"].violated
    assert got["process"].gap_s == 5.0
    rec = observe(rec, ev.replicated(1, ckpt(c10), protects="domain"))
    got = {f.domain: f for f in figures(rec, "process", {"host": 8})}
    assert [got[d].recoverable_step for d in FAILURE_DOMAINS] == [10, 10, 10, None]
    assert not got["host"].violated and got["host"].rpo_steps == 8
    assert got["process"].rpo_steps is None and not got["process"].violated


def test_a_revocation_falls_back_and_a_restart_forgets_the_abandoned_timeline() -> None:
    ev = Ev()
    c5, c10 = ev.committed(1, 5), ev.committed(1, 10)
    log: list[Event] = [ev.step(1, 5), c5, ev.step(1, 10), c10, ev.step(1, 12)]
    rec = fold(log)
    assert figure(rec, "host", "host", {}).recoverable_step == 10
    rec = observe(rec, ev.revoke(1, ckpt(c10)))
    assert (figure(rec, "host", "host", {}).recoverable_step, rec.step) == (5, 12)
    rec = observe(rec, ev.generation_started(2, resume_step=5))
    f = figure(rec, "process", "host", {"process": 0})
    assert (f.committed_step, f.recoverable_step, f.gap_steps, f.violated) == (5, 5, 0, False)


def test_failure_classes_map_to_the_domain_they_lost() -> None:
    assert domain_of("infrastructure") == "host"
    assert {domain_of(c) for c in ("worker_crash", "hang", "job", "storage")} == {"process"}


# -- generated histories ---------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(("step", "commit", "replicate", "revoke", "restart")),
                         st.integers(0, 40), st.sampled_from(FAILURE_DOMAINS)),
               max_size=60)


def history(ops: list[tuple[str, int, str]]) -> list[Event]:
    """A plausible log: steps forward, commits after the latest, replicas and revocations of
    committed checkpoints, restarts from a committed step (what the run fold admits)."""
    ev, gen, step = Ev(tick=7), 1, 0
    out: list[Event] = [ev.generation_started(1)]
    live: list[ManifestCommitted] = []
    for op, n, domain in ops:
        if op == "step":
            for _ in range(1 + n % 4):
                step += 1
                out.append(ev.step(gen, step, step_time_ms=5.0))
        elif op == "commit" and step > 0 and (not live or live[-1].step < step):
            live.append(ev.committed(gen, step, manifest_digest=f"d{len(out)}"))
            out.append(live[-1])
        elif op == "replicate" and live:
            out.append(ev.replicated(gen, ckpt(live[n % len(live)]), protects=domain))
        elif op == "revoke" and live:
            out.append(ev.revoke(gen, ckpt(live.pop(n % len(live)))))
        elif op == "restart":
            gen += 1
            step = live[n % len(live)].step if live else 0
            live = [c for c in live if c.step <= step]
            out.append(ev.generation_started(gen, resume_step=step if live else None))
    return out


def oracle(log: list[Event], domain: str, first: str) -> tuple[int, int | None]:
    """(committed step, recoverable step), read from the whole log with no state kept."""
    starts = [i for i, e in enumerate(log) if isinstance(e, GenerationStarted)]
    g = starts[-1]
    gs = log[g]
    assert isinstance(gs, GenerationStarted)
    later = [e.step for e in log[g:] if isinstance(e, StepCommitted)]
    committed = later[-1] if later else gs.resume_step or 0
    best: int | None = None
    want = FAILURE_DOMAINS.index(domain)
    for i, c in enumerate(log):
        if not isinstance(c, ManifestCommitted):
            continue
        after = log[i + 1:]
        if any((isinstance(e, CheckpointRevoked) and e.manifest_digest == c.manifest_digest)
               or (isinstance(e, ManifestCommitted) and e.step == c.step)
               or (isinstance(e, GenerationStarted) and (e.resume_step or 0) < c.step)
               for e in after):
            continue
        wides = [FAILURE_DOMAINS.index(first)] + [
            FAILURE_DOMAINS.index(e.protects) for e in after
            if isinstance(e, CheckpointReplicated) and e.manifest_digest == c.manifest_digest]
        if max(wides) >= want and (best is None or c.step > best):
            best = c.step
    return committed, best


@settings(max_examples=300, deadline=None)
@given(OPS, st.sampled_from(FAILURE_DOMAINS), st.dictionaries(
    st.sampled_from(FAILURE_DOMAINS), st.integers(0, 30)))
def test_figures_match_the_oracle_and_order_the_domains(
        ops: list[tuple[str, int, str]], first: str, rpo: dict[str, int]) -> None:
    log = history(ops)
    figs = figures(fold(log), first, rpo)
    for f in figs:
        committed, best = oracle(log, f.domain, first)
        assert (f.committed_step, f.recoverable_step) == (committed, best), f
        assert f.gap_steps == committed - (best or 0) >= 0
        assert f.violated == (f.domain in rpo and f.gap_steps > rpo[f.domain])
        assert f.gap_s is None or f.gap_s >= 0
    # A copy that survives a wider loss survives every narrower one.
    steps = [f.recoverable_step or 0 for f in figs]
    assert steps == sorted(steps, reverse=True)


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_a_verified_cluster_copy_of_the_latest_step_closes_every_gap(
        ops: list[tuple[str, int, str]]) -> None:
    log = history(ops)
    rec = fold(log)
    ev = Ev(start=10**13)
    c = ev.committed(99, rec.step + 1, manifest_digest="last")
    rec = observe(observe(observe(rec, ev.step(99, rec.step + 1)), c),
                  ev.replicated(99, ckpt(c), protects="cluster"))
    assert all(f.gap_steps == 0 and f.gap_s == 0.0 and not f.violated
               for f in figures(rec, "process", {d: 0 for d in FAILURE_DOMAINS}))

"""Hypothesis strategies shared by the events tests, and the event families they use.

Arbitrary valid events of every type (for the codec), plausible logs of one run
(biased towards the happy path, with generations and steps drawn near the
current ones, so the fold's deep states are reached), fully random logs, and an
interleaving of several runs' logs. Logs are built with ``tests.events.builders.Ev``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from hypothesis import strategies as st

from events.fold import evolve
from events.model import (
    CHECKPOINT_STAGES,
    CORDON_MODES,
    EVENT_TYPES,
    FAILURE_ACTIONS,
    FAILURE_CLASSES,
    NODE_OPERATIONS,
    OUTCOMES,
    PREFLIGHT_VERDICTS,
    PRINCIPAL_ROLES,
    SEVERITIES,
    VERIFY_REASONS,
    AgentHeartbeatRecorded,
    AgentRegistered,
    AlertRaised,
    AlertResolved,
    CheckpointReplicated,
    CheckpointRestored,
    CheckpointRevoked,
    CheckpointSkipped,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    CursorAdvanced,
    Event,
    FailureClassified,
    GroupStartCommanded,
    GroupStopCommanded,
    Header,
    HeartbeatRecorded,
    ManifestCommitted,
    ManifestProposed,
    Member,
    MemberBeat,
    MembershipConfirmed,
    NodeCordoned,
    NodeLost,
    NodeOperationRequested,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    PreflightCheck,
    RunManifestPublished,
    ShardWritten,
    StepCommitted,
    WorkerExited,
    WriteRejected,
)
from events.registry import SchemaRegistry
from events.sdc import SDC_DETECTORS, SDC_VERDICTS
from events.state import Checkpoint, RunState, Status
from tests.events.builders import MEMBERS, Ev

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

LOGICAL_IDS = tuple(m.logical_id for m in MEMBERS)

# Reports, checkpoint facts and start commands that must carry the live generation
# (docs/architecture.md §6).
FENCED_TYPES: tuple[type[Event], ...] = (
    HeartbeatRecorded,
    StepCommitted,
    ShardWritten,
    ManifestProposed,
    ManifestCommitted,
    CursorAdvanced,
    WorkerExited,
    MembershipConfirmed,
    GroupStartCommanded,
    CheckpointStaged,
    CheckpointSkipped,
    CheckpointWriteFailed,
    CheckpointVerificationFailed,
    CheckpointRestored,
    CheckpointReplicated,
    CheckpointRevoked,
)
# Fenced reports that also name a member: refused from a logical id outside the group.
MEMBER_TYPES: tuple[type[Event], ...] = (
    HeartbeatRecorded,
    WorkerExited,
    ShardWritten,
    CheckpointWriteFailed,
    CheckpointVerificationFailed,
    CheckpointRestored,
    CheckpointReplicated,
)
MTBF_SOURCES = ("fixed", "prior", "observed")
# Legal even after the run has ended; they never move the status.
INFORMATIONAL_TYPES: tuple[type[Event], ...] = (WriteRejected, AlertRaised, AlertResolved,
                                               GroupStopCommanded, RunManifestPublished,
                                               NodeLost)
# Node-scoped inventory events: keyed ``node/<name>``, never a run's.
NODE_TYPES: tuple[type[Event], ...] = (AgentRegistered, AgentHeartbeatRecorded, NodeQuarantined,
                                       NodeOperationRequested, NodeCordoned, NodeUncordoned,
                                       NodeQuarantineExpired)


def fold_one(events: list[Event]) -> RunState | None:
    """One run's log folded with ``evolve`` (rejections included, as the fold sees them)."""
    state: RunState | None = None
    for e in events:
        state = evolve(state, e)
    return state


# --- arbitrary valid events (for the codec) ---------------------------------------

# Text that UTF-8 can encode (no lone surrogates), including non-BMP characters.
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
nonempty_texts = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=24)
longs = st.one_of(
    st.integers(LONG_MIN, LONG_MAX),
    st.sampled_from([0, 1, -1, LONG_MIN, LONG_MAX, 2**31, -(2**31) - 1, 2**53 + 1]),
)
nonneg_longs = st.integers(0, LONG_MAX)
doubles = st.floats(allow_nan=False)  # NaN != NaN would defeat equality, not the codec



@functools.cache
def written_version(event_type: str) -> int:
    """The schema version the codec writes ``event_type`` with (its newest file);
    decoding reports that version in ``header.schema_version``."""
    return SchemaRegistry.from_directory().latest(event_type).version


@functools.cache
def headers_of(version: int = 1) -> st.SearchStrategy[Header]:
    return st.builds(
        Header,
        event_id=nonempty_texts,
        run_id=nonempty_texts,
        generation=nonneg_longs,
        occurred_at=nonneg_longs,
        producer=nonempty_texts,
        causation_id=st.none() | texts,
        schema_version=st.just(version),
    )


headers = headers_of(1)
members = st.builds(Member, logical_id=texts, node=texts, slot=longs,
                    domain=st.none() | texts)
preflight_checks = st.builds(PreflightCheck, check=texts, subject=texts,
                             verdict=st.sampled_from(PREFLIGHT_VERDICTS),
                             figure=st.none() | doubles, threshold=st.none() | doubles,
                             unit=texts, reason=texts)
member_beats = st.builds(MemberBeat, logical_id=texts, step=longs, closing=st.booleans())


def _for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for a field from its type hint (the catalog uses only these shapes)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.none() | _for_type(inner)
    if origin is tuple:
        (inner, _) = typing.get_args(tp)
        return st.lists(_for_type(inner), max_size=4).map(tuple)
    if origin is dict:
        key, value = typing.get_args(tp)
        return st.dictionaries(_for_type(key), _for_type(value), max_size=4)
    if tp is Header:
        return headers
    if tp is Member:
        return members
    if tp is MemberBeat:
        return member_beats
    if tp is PreflightCheck:
        return preflight_checks
    if tp is str:
        return texts
    if tp is bool:
        return st.booleans()
    if tp is int:
        return longs
    if tp is float:
        return doubles
    if tp is bytes:
        return st.binary(max_size=40)
    raise TypeError(f"no strategy for field type {tp!r}")


# A valid ``events.names`` name, and a key id (16 lowercase hex characters).
principal_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)
key_ids = st.from_regex(r"[0-9a-f]{16}", fullmatch=True)

# Fields whose values ``__post_init__`` constrains beyond their Avro type.
_CONSTRAINED: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("RunSubmitted", "spec_digest"): nonempty_texts,
    ("RunSubmitted", "principal"): nonempty_texts,
    ("RunSubmitted", "world_size"): st.integers(1, LONG_MAX),
    ("RunAdmitted", "members"): st.lists(members, min_size=1, max_size=4).map(tuple),
    ("FailureClassified", "failure_class"): st.sampled_from(FAILURE_CLASSES),
    ("FailureClassified", "action"): st.sampled_from(FAILURE_ACTIONS),
    ("AlertRaised", "severity"): st.sampled_from(SEVERITIES),
    ("RunFinished", "outcome"): st.sampled_from(OUTCOMES),
    ("RunManifestPublished", "digest"): st.text(max_size=8).map(lambda t: f"sha256:{t}"),
    ("AgentRegistered", "node"): nonempty_texts,
    ("AgentRegistered", "slots"): st.integers(1, LONG_MAX),
    ("CheckpointStaged", "mode"): st.sampled_from(("sync", "async")),
    ("NodeOperationRequested", "operation"): st.sampled_from(NODE_OPERATIONS),
    ("NodeOperationRequested", "principal"): nonempty_texts,
    ("NodeOperationRequested", "epoch"): st.none() | st.integers(0, LONG_MAX),
    ("NodeCordoned", "mode"): st.sampled_from(CORDON_MODES),
    ("CheckpointWriteFailed", "stage"): st.sampled_from(CHECKPOINT_STAGES),
    ("CheckpointVerificationFailed", "reason"): st.sampled_from(VERIFY_REASONS),
    ("CheckpointIntervalChanged", "mtbf_source"): st.sampled_from(MTBF_SOURCES),
    # Both lists have one entry per step: three steps each.
    ("StepTimesRecorded", "first_step"): st.integers(LONG_MIN, LONG_MAX - 2),
    ("StepTimesRecorded", "step_time_ms"): st.lists(doubles, min_size=3, max_size=3).map(tuple),
    ("StepTimesRecorded", "input_wait_ms"): st.lists(doubles, min_size=3, max_size=3).map(tuple),
    ("PrincipalKeyRegistered", "principal"): principal_names,
    ("PrincipalKeyRegistered", "role"): st.sampled_from(PRINCIPAL_ROLES),
    ("PrincipalKeyRegistered", "key_id"): key_ids,
    ("PrincipalKeyRegistered", "public_key"): st.binary(min_size=32, max_size=32),
    ("PrincipalKeyRevoked", "principal"): principal_names,
    ("PrincipalKeyRevoked", "key_id"): key_ids,
    ("PreflightCompleted", "spec_digest"): nonempty_texts,
    ("PreflightCompleted", "principal"): nonempty_texts,
    ("PreflightCompleted", "verdict"): st.sampled_from(PREFLIGHT_VERDICTS[:2]),
    ("PilotCompleted", "spec_digest"): nonempty_texts,
    ("PilotCompleted", "principal"): nonempty_texts,
    ("PilotCompleted", "verdict"): st.sampled_from(PREFLIGHT_VERDICTS[:2]),
    ("DrillCompleted", "spec_digest"): nonempty_texts,
    ("DrillCompleted", "principal"): nonempty_texts,
    ("DrillCompleted", "fault"): nonempty_texts,
    ("DrillCompleted", "verdict"): st.sampled_from(PREFLIGHT_VERDICTS),
    ("CorruptionSuspected", "detector"): st.sampled_from(SDC_DETECTORS),
    ("CorruptionClassified", "detector"): st.sampled_from(SDC_DETECTORS),
    ("CorruptionClassified", "verdict"): st.sampled_from(SDC_VERDICTS),
    ("CorruptionClassified", "ranks"): st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple),
}


def _per_rank(n: int, ranks: bool) -> dict[str, st.SearchStrategy[Any]]:
    """One fingerprint and one node per rank of a group of ``n``; ``ranks`` among them;
    ``consumed`` one per rank too, or none (a v1 record)."""
    out = {"fingerprints": st.lists(texts, min_size=n, max_size=n).map(tuple),
           "nodes": st.lists(texts, min_size=n, max_size=n).map(tuple),
           "consumed": st.one_of(st.just(()),
                                 st.lists(texts, min_size=n, max_size=n).map(tuple))}
    if ranks:
        out["ranks"] = st.lists(st.integers(0, n - 1), max_size=n).map(tuple)
    return out


# Types whose per-rank fields must agree in length (events.sdc): whether they have ranks.
_PER_RANK: dict[str, bool] = {"CorruptionSuspected": True, "StepReplayed": False}

# Fields a newer schema version added: also drawn all absent together, as an older
# writer's record reads (ManifestProposed v2's data cursor).
_ADDED_IN_LATER_VERSIONS: dict[str, tuple[str, ...]] = {
    "ManifestProposed": ("epoch", "position", "source_counts", "mixture_targets"),
    "CursorAdvanced": ("mixture_targets",),
    "GenerationStarted": ("replicas", "accumulation"),
}


def event_of(cls: type[Event]) -> st.SearchStrategy[Event]:
    """Arbitrary valid instances of one event class, derived from its type hints.

    ``header.schema_version`` is the version the codec writes the class with, so
    a decoded event equals the one encoded.
    """
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        constrained = _CONSTRAINED.get((cls.__name__, f.name))
        kwargs[f.name] = _for_type(hints[f.name]) if constrained is None else constrained
    kwargs["header"] = headers_of(written_version(cls.__name__))
    if cls.__name__ in _PER_RANK:
        ranked = _PER_RANK[cls.__name__]
        return st.integers(1, 4).flatmap(
            lambda n: st.builds(cls, **{**kwargs, **_per_rank(n, ranked)}))
    full = st.builds(cls, **kwargs)
    added = _ADDED_IN_LATER_VERSIONS.get(cls.__name__)
    if not added:
        return full
    older = st.builds(cls, **{**kwargs, **{name: st.none() for name in added}})
    return st.one_of(older, full)


any_event = st.one_of([event_of(cls) for cls in EVENT_TYPES.values()])


# --- plausible logs of one run (for the fold) ---------------------------------------

# Kinds of event a log draws from. The happy path is repeated so deep states are
# reached; terminal events are rare so most logs run for a while.
_HAPPY = ("next",) * 6 + ("step", "step", "committed", "committed", "cursor", "heartbeat",
                          "heartbeat", "heartbeat",
                          "failure", "gs")
_OTHER = (
    "submitted", "cancel_requested", "queued", "admitted", "gs", "confirmed", "shard",
    "proposed", "exited", "failure", "rejected", "alert", "group_start", "group_stop", "node",
    # The checkpoint protocol: reports, and the controller's revocations and intervals.
    "staged", "skipped", "write_failed", "verify_failed", "restored", "revoked",
    "interval",
)
_TERMINAL = ("cancelled", "finished")
KINDS = _HAPPY * 2 + _OTHER + _TERMINAL
_KINDS = st.sampled_from(_HAPPY * 2 + _OTHER)
_ANY_KIND = st.sampled_from(KINDS)


@functools.cache
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.cache
def _one(*choices: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(choices)


_IDS = _one(*LOGICAL_IDS, "w9")
_MAYBE_SIGNAL = st.none() | _one(9, 15)
_MAYBE_EXIT = st.none() | _ints(0, 255)


def _near(draw: st.DrawFn, base: int, below: int = 1, above: int = 2) -> int:
    return max(0, base + draw(_ints(-below, above)))


def _event_near(draw: st.DrawFn, kind: str, state: RunState, ev: Ev) -> Event:
    """An event of ``kind`` whose generation and step sit near the state's."""
    g = state.generation
    gen = draw(_one(g, g, g, g, g + 1, max(0, g - 1), g + 2))
    ckpt = state.checkpoint.step if state.checkpoint else 0
    if kind == "next":  # the happy-path successor of the current status
        kind = {
            Status.SUBMITTED: "admitted",
            Status.QUEUED: "admitted",
            Status.ADMITTED: "gs",
            Status.STARTING: "confirmed",
            Status.RECOVERING: "confirmed",
        }.get(state.status) or draw(_one("step", "committed", "cursor"))
        gen = g + 1 if kind == "gs" else g
    match kind:
        case "submitted":
            return ev.submitted(gen)
        case "cancel_requested":
            return ev.cancel_requested(gen)
        case "queued":
            return ev.queued(gen)
        case "admitted":
            return ev.admitted(gen)
        case "gs":  # a restart: mostly the next generation
            resume = draw(_one(None, ckpt, ckpt, ckpt + 1, 0))
            return ev.generation_started(draw(_one(g + 1, g + 1, g + 1, gen)), resume_step=resume)
        case "confirmed":
            return ev.confirmed(gen)
        case "heartbeat":
            lid = draw(_IDS)
            return ev.heartbeat(gen, lid, step=state.step)
        case "step":
            return ev.step(gen, _near(draw, state.step + 1),
                           tokens=draw(_ints(0, 10_000)), loss_tokens=draw(_ints(0, 10_000)))
        case "shard":
            return ev.shard(gen, _near(draw, state.step), draw(_IDS))
        case "proposed":
            return ev.proposed(gen, _near(draw, max(ckpt, state.step), 1, 3),
                               with_cursor=draw(st.booleans()))
        case "staged":
            return ev.staged(gen, _near(draw, state.step), draw(_one("sync", "async")),
                             backlog=draw(_ints(0, 2)), durable_step=draw(_one(None, ckpt)))
        case "skipped":
            return ev.skipped(gen, _near(draw, state.step))
        case "write_failed":
            return ev.write_failed(gen, _near(draw, state.step), draw(_IDS),
                                   draw(_one(*CHECKPOINT_STAGES)))
        case "verify_failed" | "restored" | "revoked":
            # Mostly the latest committed checkpoint, else an older one of the
            # history, else one the run never committed.
            history = state.checkpoints
            unknown = Checkpoint(ckpt + 1, "ckpt/x/manifest.json", f"sha256:unknown{ckpt}", g, 0)
            pick = draw(_ints(0, 9))
            if history and pick < 6:
                target = history[-1]
            elif history and pick < 8:
                target = history[draw(_ints(0, len(history) - 1))]
            else:
                target = unknown
            if kind == "revoked":
                return ev.revoke(gen, target)
            if kind == "restored":
                return ev.restored(gen, target, draw(_IDS), fell_back=draw(_ints(0, 2)))
            return ev.verify_failed(gen, target, draw(_IDS), draw(_one(*VERIFY_REASONS)))
        case "interval":
            return ev.interval(gen, draw(_one(0, 1, 50, 500)), draw(_one(*MTBF_SOURCES)))
        case "committed":
            return ev.committed(gen, _near(draw, max(ckpt, state.step), 1, 3))
        case "cursor":
            cur = state.cursor.step if state.cursor else 0
            return ev.cursor(gen, draw(_one(ckpt, ckpt, ckpt, cur, ckpt + 1)))
        case "exited":
            return ev.exited(gen, draw(_IDS), exit_code=draw(_MAYBE_EXIT),
                             signal=draw(_MAYBE_SIGNAL))
        case "failure":
            return ev.failure(gen, draw(_one(*FAILURE_ACTIONS)),
                              signature=draw(_one("crash:w1", "hang", "nan")))
        case "rejected":
            return ev.rejected(gen)
        case "alert":
            return ev.alert(gen)
        case "group_start":
            return ev.group_start(gen, resume_step=draw(_one(None, ckpt)))
        case "group_stop":
            return ev.group_stop(gen)
        case "node":  # inventory events, some wrongly keyed by this run's id
            run_id = draw(_one(None, ev.run_id))
            make = draw(_one(ev.agent_registered, ev.agent_heartbeat, ev.quarantined))
            return make(run_id=run_id)  # type: ignore[no-any-return]
        case "cancelled":
            return ev.cancelled(gen)
        case "finished":
            # Success is only possible from Running; aim for both outcomes to happen.
            if state.status == Status.RUNNING:
                outcome = draw(_one("succeeded", "succeeded", "failed"))
            else:
                outcome = draw(_one("failed", "failed", "succeeded"))
            return ev.finished(draw(_one(g, g, gen)), outcome)
    raise AssertionError(kind)


@st.composite
def run_logs(draw: st.DrawFn, run_id: str = "r1", max_events: int = 50) -> list[Event]:
    """A RunSubmitted, then a random mix of every event type, times increasing.

    Generations and steps are drawn near the state the log has reached so far
    (the fold is used only to aim; the properties under test are checked
    separately), so logs reach Running, checkpoints, cursors and restarts.
    """
    ev = Ev(run_id, start=draw(_ints(0, 2**40)), tick=1)
    events: list[Event] = [ev.submitted(draw(_one(0, 0, 0, 1)))]
    state = evolve(None, events[0])
    assert state is not None
    _extend(draw, ev, events, state, draw(_ints(0, max_events)))
    return events


def _extend(draw: st.DrawFn, ev: Ev, events: list[Event], state: RunState, n: int) -> RunState:
    """Append ``n`` events drawn near ``state`` (the fold of ``events``); the new state."""
    for _ in range(n):
        ev.tick = draw(_ints(1, 60_000))
        # About one event in 45 ends the run, so most logs get somewhere first.
        ending = draw(_ints(0, 44)) == 44
        e = _event_near(draw, draw(_one(*_TERMINAL)) if ending else draw(_KINDS), state, ev)
        events.append(e)
        state = evolve(state, e) or state
    return state


@st.composite
def restore_logs(draw: st.DrawFn, run_id: str = "r1", max_events: int = 30) -> list[Event]:
    """A run that commits 1..6 checkpoints, fails, and restarts; the new generation's
    restore refuses the newest 1..all of them (``CheckpointVerificationFailed``, then
    the controller's ``CheckpointRevoked``), loads the one before (``CheckpointRestored``)
    and trains on; then random events as in ``run_logs``.

    Every log reaches a revocation under the live generation, so the fold's fallback
    rules are exercised on every example, not on a lucky few; the odd event of the
    scripted part is also drawn from a stale generation or a non-member.
    """
    ev = Ev(run_id, start=draw(_ints(0, 2**40)), tick=draw(_ints(1, 60_000)))
    events: list[Event] = [ev.submitted(), ev.admitted(), ev.generation_started(1), ev.confirmed(1)]
    step = 0
    for _ in range(draw(_ints(1, 6))):
        step += draw(_ints(1, 4))
        events.append(ev.step(1, step))
        if draw(_ints(0, 3)):  # most steps get a checkpoint, some also a cursor
            events.append(ev.committed(1, step))
            if draw(st.booleans()):
                events.append(ev.cursor(1, step))
    state = fold_one(events)
    assert state is not None
    # Training got past the last checkpoint, then a worker failed: restart from it.
    events += [ev.step(1, step + 1), ev.failure(1, "restart")]
    gen = 2
    latest = state.checkpoint
    events.append(ev.generation_started(gen, resume_step=latest.step if latest else None))
    history = list(state.checkpoints)
    for _ in range(draw(_ints(1, max(1, len(history))))):
        if not history:
            break
        bad = history.pop()
        reporter = draw(_one("w0", "w0", "w1", "w9"))  # w9 is no member: refused
        report_gen = draw(_one(gen, gen, gen, 1))  # generation 1 is revoked: refused
        events.append(ev.verify_failed(report_gen, bad, reporter,
                                       draw(_one(*VERIFY_REASONS))))
        events.append(ev.revoke(draw(_one(gen, gen, gen, gen, 1)), bad))
    fallback = history[-1] if history else None
    if fallback is not None:
        events.append(ev.restored(gen, fallback, "w0",
                                  fell_back=len(state.checkpoints) - len(history)))
    events.append(ev.confirmed(gen))
    state2 = fold_one(events)
    assert state2 is not None
    _extend(draw, ev, events, state2, draw(_ints(0, max_events)))
    return events


@st.composite
def terminated_logs(draw: st.DrawFn, run_id: str = "r1") -> tuple[list[Event], list[Event]]:
    """(a log that ends by making the run terminal, then any suffix of events)."""
    log = draw(run_logs(run_id, max_events=30))
    state = fold_one(log)
    assert state is not None
    ev = Ev(run_id, start=log[-1].header.occurred_at, tick=1)
    ev._n = len(log)
    if not state.status.terminal:
        choices = ["cancelled", "failed"]
        if state.status == Status.RUNNING:
            choices.append("succeeded")
        how = draw(_one(*choices))
        if how == "cancelled":
            log.append(ev.cancelled(state.generation))
        else:
            log.append(ev.finished(state.generation, how))
    suffix: list[Event] = []
    probe = fold_one(log)
    assert probe is not None and probe.status.terminal
    for _ in range(draw(_ints(1, 20))):
        kind = draw(_ANY_KIND)
        suffix.append(_event_near(draw, kind, probe, ev))
    return log, suffix


@st.composite
def random_logs(draw: st.DrawFn, run_id: str = "r1", max_events: int = 30) -> list[Event]:
    """Events of one run in a fully random order: no RunSubmitted first, times anywhere.

    Built from a plausible log (so the events are of interesting kinds and values),
    then permuted, with a few state-blind events mixed in.
    """
    base = draw(run_logs(run_id, max_events=max_events))
    ev = Ev(run_id, start=draw(_ints(0, 2**40)), tick=1)
    blind_state = RunState(run_id, Status.RUNNING, "d", "p", 1, None, 0, 0,
                           generation=draw(_ints(0, 3)), step=draw(_ints(0, 5)))
    extra = [
        _event_near(draw, draw(_ANY_KIND), blind_state, ev)
        for _ in range(draw(_ints(0, 8)))
    ]
    return draw(st.permutations(base + extra))


@st.composite
def interleavings(draw: st.DrawFn, runs: int = 3) -> tuple[list[list[Event]], list[Event]]:
    """Several runs' logs and one merge of them that keeps each run's order."""
    logs = [draw(run_logs(f"run-{i}", max_events=20)) for i in range(runs)]
    order = draw(st.permutations([i for i, log in enumerate(logs) for _ in log]))
    iters = [iter(log) for log in logs]
    return logs, [next(iters[i]) for i in order]


def stale_probe(kind: type[Event], gen: int, ev: Ev, step: int,
                ckpt: Checkpoint | None = None) -> Event:
    """A fenced report or fact of type ``kind`` carrying generation ``gen``; the
    checkpoint events name ``ckpt`` (the state's latest, so only the fence refuses)."""
    probe_ckpt = ckpt or Checkpoint(step, f"ckpt/s{step}/manifest.json", f"sha256:s{step}", 0, 0)
    builders: dict[type[Event], Any] = {
        HeartbeatRecorded: lambda: ev.heartbeat(gen, "w0", step),
        StepCommitted: lambda: ev.step(gen, step + 1),
        ShardWritten: lambda: ev.shard(gen, step + 1),
        ManifestProposed: lambda: ev.proposed(gen, step + 1),
        ManifestCommitted: lambda: ev.committed(gen, step + 1),
        CursorAdvanced: lambda: ev.cursor(gen, step),
        WorkerExited: lambda: ev.exited(gen, "w0"),
        MembershipConfirmed: lambda: ev.confirmed(gen),
        GroupStartCommanded: lambda: ev.group_start(gen),
        FailureClassified: lambda: ev.failure(gen, "restart"),
        CheckpointStaged: lambda: ev.staged(gen, step),
        CheckpointSkipped: lambda: ev.skipped(gen, step),
        CheckpointWriteFailed: lambda: ev.write_failed(gen, step + 1, "w0"),
        CheckpointVerificationFailed: lambda: ev.verify_failed(gen, probe_ckpt, "w0"),
        CheckpointRestored: lambda: ev.restored(gen, probe_ckpt, "w0"),
        CheckpointReplicated: lambda: ev.replicated(gen, probe_ckpt, "w0"),
        CheckpointRevoked: lambda: ev.revoke(gen, probe_ckpt),
    }
    return builders[kind]()  # type: ignore[no-any-return]

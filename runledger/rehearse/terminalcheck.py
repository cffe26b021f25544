"""Judging a run's terminal state: did its end leave what it must, and no more? Pure.

:func:`judge_terminal` takes the run's facts (its ``runledger.runs`` records in
log order), optionally its ``runledger.reports`` records (the workers' exits
after a cancellation are refused as facts, so only the reports show them), and
a listing of the run's directory under its checkpoint root (:func:`list_run`
makes one). It returns one row per rule (``events.model.PreflightCheck``, as
preflight and the drill report them):

1. ``terminal``: the run ended (``RunFinished`` or ``RunCancelled`` accepted);
   every other rule is skipped while it has not;
2. ``fenced``: after the fact that ended it, the log holds nothing of the run
   but informational records (rejections, alerts, stop commands, the manifest):
   a worker's report kept as a fact after the end means the fence leaked; the
   figure is how many;
3. ``stopped``: every member of the last generation reported its exit
   (``WorkerExited``); a run that never started a generation passes;
4. ``manifest``: ``RunManifestPublished`` follows the end and its digest is the
   one rebuilt from the facts (``events.runmanifest.build``);
5. ``manifest_file``: ``run-manifest.json`` is in the listing (skipped when the
   run has no checkpoint root: the log alone keeps its manifest);
6. ``committed_kept``: every checkpoint the manifest lists as retained (the
   final one among them) still has its ``manifest.json`` in the listing;
7. ``residue``: what the run left behind that no commit vouches for, at most
   ``residue_bound``: checkpoint directories that the log never committed (or
   revoked) and ``*.partial`` files. The reason names each;
8. ``slots``: each node of the last generation, in its newest agent heartbeat
   (``AgentHeartbeatRecorded`` among ``reports``, run id ``node/<name>``) sent
   after the end and after its members' exits, holds no busy slot; skipped,
   naming the nodes, when no such heartbeat was passed. Another run's workers
   on the node count too: judge a drill on nodes of its own.

A listing is a sequence of file paths, either relative to the run's directory
(``g000002/step-0000000020/manifest.json``) or containing ``/<run id>/``
followed by that relative path (full URLs, as ``manifest_path`` holds them).

Tested in tests/runledger/rehearse/test_terminalcheck.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from events import runmanifest
from events.fold import apply
from events.fold_info import INFORMATIONAL
from events.model import (
    AgentHeartbeatRecorded,
    CheckpointRevoked,
    Event,
    ManifestCommitted,
    PreflightCheck,
    RunCancelled,
    RunFinished,
    RunManifestPublished,
    WorkerExited,
)
from events.state import RunState
from worker.layout import parse_generation, parse_step

PASS, FAIL, SKIP = "pass", "fail", "skip"
CHECKS = ("terminal", "fenced", "stopped", "manifest", "manifest_file", "committed_kept",
          "residue", "slots")
_SHOWN = 5  # names quoted in a reason before "and N more"


@dataclass(frozen=True, slots=True)
class _Replay:
    """The run's facts replayed through the run fold, as the controller accepted them."""

    state: RunState | None
    end_index: int | None  # position of the accepted fact that ended the run
    after_end: tuple[Event, ...]  # records of the run logged after it
    published: RunManifestPublished | None
    committed: frozenset[tuple[int, int]]  # (generation, step), revoked ones removed


def _replay(facts: Sequence[Event]) -> _Replay:
    state: RunState | None = None
    end: int | None = None
    after: list[Event] = []
    published: RunManifestPublished | None = None
    by_digest: dict[str, tuple[int, int]] = {}
    for i, event in enumerate(facts):
        if end is not None and event.run_id == facts[end].run_id:
            after.append(event)  # as logged: a fence that held refused it before the log
        t = apply(state, event)
        if not t.verdict.accepted or t.state is None:
            continue
        state = t.state
        if end is None and isinstance(event, RunFinished | RunCancelled):
            end = i
        if isinstance(event, RunManifestPublished) and end is not None:
            published = event
        elif isinstance(event, ManifestCommitted):
            by_digest[event.manifest_digest] = (event.generation, event.step)
        elif isinstance(event, CheckpointRevoked):
            by_digest.pop(event.manifest_digest, None)
    return _Replay(state, end, tuple(after), published, frozenset(by_digest.values()))


def relative(path: str, run_id: str) -> str:
    """``path`` relative to the run's directory (unchanged when it names no such directory)."""
    marker = f"/{run_id}/"
    at = path.rfind(marker)
    if at >= 0:
        return path[at + len(marker):]
    return path[len(run_id) + 1:] if path.startswith(run_id + "/") else path


def _row(check: str, subject: str, verdict: str, reason: str, figure: float | None = None,
         threshold: float | None = None, unit: str = "") -> PreflightCheck:
    return PreflightCheck(check=check, subject=subject, verdict=verdict, figure=figure,
                          threshold=threshold, unit=unit, reason=reason)


def _names(items: Sequence[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def judge_terminal(facts: Iterable[Event], listing: Iterable[str], *,
                   reports: Iterable[Event] = (), residue_bound: int = 0,
                   run_id: str | None = None) -> tuple[PreflightCheck, ...]:
    """One row per rule of the module docstring, in that order."""
    mine = [e for e in facts if run_id is None or e.run_id == run_id]
    replay = _replay(mine)
    state = replay.state
    if state is None:
        who = run_id or "(none given)"
        return (_row("terminal", who, FAIL, f"no RunSubmitted among the facts of run {who}: "
                     "pass the run's runledger.runs records (`runledger log --run RUN`)"),)
    rid = state.run_id
    if replay.end_index is None:
        rows = [_row("terminal", rid, FAIL, f"run {rid} is {state.status.value}, not ended: "
                     f"cancel it (`runledger cancel {rid}`) or wait for it to finish")]
        return tuple(rows + [_row(c, rid, SKIP, "the run has not ended") for c in CHECKS[1:]])
    files = sorted({relative(p, rid) for p in listing})
    seen = list(reports)
    exits = [e for e in (*mine, *seen) if isinstance(e, WorkerExited) and e.run_id == rid]
    since = max([mine[replay.end_index].header.occurred_at,
                 *(e.header.occurred_at for e in exits if e.generation == state.generation)])
    beats = [e for e in seen if isinstance(e, AgentHeartbeatRecorded)
             and e.header.occurred_at >= since]
    return (_row("terminal", rid, PASS, f"run {rid} ended {state.status.value}: "
                 f"{state.outcome_reason or 'no reason given'}"),
            _fenced(rid, replay), _stopped(state, exits), *_manifest(mine, replay, files),
            _residue(rid, replay, files, residue_bound), _slots(state, beats))


def _fenced(rid: str, replay: _Replay) -> PreflightCheck:
    leaked = [e for e in replay.after_end if not isinstance(e, INFORMATIONAL)]
    if not leaked:
        return _row("fenced", rid, PASS, "nothing but informational records accepted after "
                    "the end", 0, 0, "facts")
    named = _names([f"{e.event_type} {e.header.event_id}" for e in leaked])
    return _row("fenced", rid, FAIL, f"accepted after the run ended: {named}; the run fold "
                "must refuse them (events.fold, run_terminal)", len(leaked), 0, "facts")


def _stopped(state: RunState, exits: Sequence[WorkerExited]) -> PreflightCheck:
    rid, gen = state.run_id, state.generation
    if gen == 0 or not state.members:
        return _row("stopped", rid, PASS, "no generation started: nothing to stop", 0, 0,
                    "members")
    seen = {e.logical_id for e in exits if e.generation == gen}
    missing = [f"{m.logical_id} on {m.node}" for m in state.members if m.logical_id not in seen]
    if not missing:
        return _row("stopped", rid, PASS, f"all {len(state.members)} member(s) of generation "
                    f"{gen} reported their exit", 0, 0, "members")
    return _row("stopped", rid, FAIL, f"no WorkerExited from {_names(missing)} (generation "
                f"{gen}): pass the run's runledger.reports records, else its agent never "
                "stopped it; check `runledger nodes` and the agent's log", len(missing), 0,
                "members")


def _manifest(facts: Sequence[Event], replay: _Replay,
              files: Sequence[str]) -> tuple[PreflightCheck, ...]:
    rid = replay.state.run_id if replay.state is not None else ""
    pub = replay.published
    if pub is None:
        why = "the run ended without one: the controller appends it with the end"
        return (_row("manifest", rid, FAIL, f"no RunManifestPublished; {why}"),
                _row("manifest_file", rid, SKIP, "no RunManifestPublished"),
                _row("committed_kept", rid, SKIP, "no RunManifestPublished"))
    doc = runmanifest.build(facts)
    rebuilt = runmanifest.digest(doc) if doc is not None else "(nothing)"
    if rebuilt == pub.digest:
        head = _row("manifest", rid, PASS, f"RunManifestPublished {pub.digest} equals the "
                    "manifest rebuilt from the facts")
    else:
        head = _row("manifest", rid, FAIL, f"RunManifestPublished says {pub.digest}, the facts "
                    f"rebuild {rebuilt}: compare with `runledger query manifest {rid}`")
    if not pub.path:
        file = _row("manifest_file", rid, SKIP, "the run has no checkpoint root: the log "
                    "alone keeps its manifest")
    elif runmanifest.FILE_NAME in files:
        file = _row("manifest_file", rid, PASS, f"{pub.path} is present")
    else:
        file = _row("manifest_file", rid, FAIL, f"{pub.path} is missing: the controller's log "
                    f"says why it could not write it; `runledger query manifest {rid}` "
                    "rebuilds it")
    return head, file, _kept(rid, doc, files)


def _kept(rid: str, doc: dict[str, Any] | None, files: Sequence[str]) -> PreflightCheck:
    retained = doc["retained_checkpoints"] if doc is not None else []
    paths = [str(c["manifest_path"]) for c in retained]
    present = set(files)
    gone = [p for p in paths if relative(p, rid) not in present]
    if not gone:
        return _row("committed_kept", rid, PASS, f"all {len(paths)} retained committed "
                    "checkpoint(s) are present", 0, 0, "checkpoints")
    return _row("committed_kept", rid, FAIL, f"committed checkpoint(s) the manifest retains are "
                f"gone: {_names(gone)}; nothing may remove a retained checkpoint at the end",
                len(gone), 0, "checkpoints")


def residue_of(run_id: str, committed: frozenset[tuple[int, int]],
               files: Iterable[str]) -> list[str]:
    """What no commit vouches for: uncommitted checkpoint directories (relative to the run's
    directory) and ``*.partial`` files, sorted."""
    out: set[str] = set()
    for f in files:
        rel = relative(f, run_id)
        if rel.endswith(".partial"):
            out.add(rel)
        parts = rel.split("/")
        if len(parts) < 3:
            continue
        gen, step = parse_generation(parts[0]), parse_step(parts[1])
        if gen is not None and step is not None and (gen, step) not in committed:
            out.add(f"{parts[0]}/{parts[1]}/")
    return sorted(out)


def _residue(rid: str, replay: _Replay, files: Sequence[str], bound: int) -> PreflightCheck:
    left = residue_of(rid, replay.committed, files)
    if len(left) <= bound:
        what = f": {_names(left)}" if left else ""
        return _row("residue", rid, PASS, f"{len(left)} uncommitted item(s) left{what}",
                    len(left), bound, "items")
    return _row("residue", rid, FAIL, f"{len(left)} uncommitted item(s) left, more than "
                f"{bound}: {_names(left)}; the end of a run removes staging residue",
                len(left), bound, "items")


def _slots(state: RunState, beats: Sequence[AgentHeartbeatRecorded]) -> PreflightCheck:
    rid = state.run_id
    nodes = sorted({m.node for m in state.members}) if state.generation else []
    if not nodes:
        return _row("slots", rid, PASS, "no generation started: no slot was held", 0, 0,
                    "slots")
    newest: dict[str, AgentHeartbeatRecorded] = {}
    for b in beats:
        if b.node in nodes and (b.node not in newest
                                or b.header.occurred_at >= newest[b.node].header.occurred_at):
            newest[b.node] = b
    unheard = [n for n in nodes if n not in newest]
    if unheard:
        return _row("slots", rid, SKIP, f"no agent heartbeat after the end from "
                    f"{_names(unheard)}: pass their AgentHeartbeatRecorded (runledger.reports, "
                    "run id node/<name>) to judge it")
    busy = [f"{n} ({newest[n].busy_slots} busy)" for n in nodes if newest[n].busy_slots]
    total = sum(newest[n].busy_slots for n in nodes)
    if not busy:
        return _row("slots", rid, PASS, f"every slot free on {_names(nodes)} after the end",
                    0, 0, "slots")
    return _row("slots", rid, FAIL, f"slots still busy after the end on {_names(busy)}: "
                "another run's workers count too; `runledger nodes` shows what runs there",
                total, 0, "slots")


def list_run(root: str, run_id: str) -> tuple[str, ...]:
    """The files under the run's directory, relative to it; () when it does not exist."""
    import fsspec  # the shell's one I/O, kept out of the rules above

    base = f"{root.rstrip('/')}/{run_id}"
    fs, path = fsspec.core.url_to_fs(base)
    if not fs.exists(path):
        return ()
    prefix = path.rstrip("/") + "/"
    return tuple(sorted(p[len(prefix):] if p.startswith(prefix) else relative(p, run_id)
                        for p in fs.find(path)))


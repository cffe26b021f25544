"""The worker session: what a training script on a GPU node uses.

    with Session.from_env() as s:
        s.attach(model=model, optimizer=opt, scheduler=sched, loader=loader)
        start = s.restore()                  # latest committed and verified, or 0
        for step in range(start + 1, total + 1):
            batch = next(loader)
            ...                              # forward, backward, optimizer step
            s.step(step, loss=loss, tokens=n, loss_tokens=m, step_time_s=dt,
                   input_wait_s=w, cursor=batch.cursor)

From the environment the agent set it joins torch.distributed (NCCL with
GPUs, gloo otherwise), reports through a background thread (heartbeats too),
checkpoints when the interval says so with the commit protocol of
docs/architecture.md §9, and advances the loader's durable cursor only when the log commits
the checkpoint that holds it.

Tested in tests/e2e/test_checkpoint.py and tests/e2e/test_demo.py.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.stateful import Stateful

from dataplane.permute import derive_key
from dataplane.state import Cursor
from events.model import (
    CheckpointRestored,
    CheckpointSkipped,
    CheckpointStaged,
    CheckpointVerificationFailed,
    CheckpointWriteFailed,
    ManifestProposed,
    ShardWritten,
    StepCommitted,
)
from events.workerenv import CheckpointEnv, WorkerEnv
from worker import restore as restoring
from worker import rng
from worker.bitflip import Injector
from worker.comm import Comm, init_distributed, stage_of
from worker.commit import ManifestFields, write_checkpoint
from worker.errors import CheckpointRejected, Fenced, StorageFault, VerificationFailed, WorkerError
from worker.faults import Faults
from worker.layout import CheckpointDir
from worker.manifest import FileEntry
from worker.persist import Persister, nbytes
from worker.reporter import Reporter
from worker.sdc import Detectors
from worker.sdc import from_environ as sdc_from_environ
from worker.sdcstep import detect, watch_consumed
from worker.tiers import Identity, Refusals, Replicator, attempts, gc_thread
from worker.trainstate import Loader, TrainState, rng_key
from worker.watcher import Watcher

VERDICT_TIMEOUT_S = 120.0
# Each rank reports its own step times in batches of this many steps (and before
# a checkpoint and at close), so a straggler shows within a few steps at a
# fraction of one event per step per rank.
STEP_TIMES_BATCH = 8


class Session:
    def __init__(self, env: WorkerEnv, ckpt: CheckpointEnv, *, comm: Comm, reporter: Reporter,
                 watcher: Watcher, faults: Faults, control: Comm | None = None,
                 sdc: Detectors | None = None) -> None:
        self.env = env
        self.ckpt = ckpt
        self.comm = comm
        # The background writer runs its collectives on ``comm``; decisions the
        # training thread takes together (is the backlog full?) need a group of
        # their own, or two threads would interleave collectives on one group.
        self.control = control or comm
        self.reporter = reporter
        self.watcher = watcher
        self.faults = faults
        self.interval_steps = ckpt.interval_steps
        self.tokens = 0
        self.loss_tokens = 0
        self.last_checkpoint_step = 0
        self.durable_step: int | None = None
        self._parent: str | None = None
        self._attached: TrainState | None = None
        self._persister = Persister(ckpt.backlog) if ckpt.mode == "async" else None
        # (step, cursor) of checkpoints committed in the background, applied on the step path
        self._commits: list[tuple[int, Cursor | None]] = []
        self._gc: threading.Thread | None = None
        self.tiers = ckpt.storage_tiers()
        # The coordinator alone fills the later tiers (worker.tiers says why).
        self._replicator = Replicator(
            self.tiers[1:], Identity(env.logical_id, reporter.header), reporter.report,
        ) if len(self.tiers) > 1 and env.rank == 0 else None
        self._times: list[tuple[int, float, float]] = []  # (step, step ms, input wait ms)
        self.sdc = sdc
        self._next_step = 1  # what the bitflip hooks flip in: the step reported next
        self._injector = Injector(faults, lambda: self._next_step)

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Session:
        environ = os.environ if environ is None else environ
        env = WorkerEnv.from_environ(environ)
        ckpt = CheckpointEnv.from_environ(environ)
        init_distributed(env)
        comm = Comm.new_group()
        control = Comm.new_group() if ckpt.mode == "async" else comm
        reporter = Reporter.connect(env).start()
        watcher = Watcher(env.bootstrap, env.run_id, env.generation).start()
        faults = Faults.from_env(environ, env.rank, env.generation, env.run_id, env.node)
        sdc = sdc_from_environ(environ, rank=env.rank, world_size=env.world_size,
                               node=env.node, gather=control.all_gather)
        return cls(env, ckpt, comm=comm, reporter=reporter, watcher=watcher, faults=faults,
                   control=control, sdc=sdc)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.close(drain=exc_type is None)

    def close(self, drain: bool = True) -> None:
        """Drain and stop the background work, the watcher (up to 10 s), and the reporter
        last: its thread heartbeats, and a rank tearing down is alive, not hung."""
        try:
            if self._persister is not None:
                if drain:
                    self._persister.drain()
                self._persister.close()
            self._apply_commits()
            if self._replicator is not None:
                if drain:
                    self._replicator.drain()
                self._replicator.close()
            if self._gc is not None:
                self._gc.join(30)
        finally:
            self.watcher.close()  # never raises: the reporter must stop after it
            self._report_times()
            self.reporter.close()

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def coordinator(self) -> bool:
        return self.env.rank == 0

    def attach(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
               scheduler: Stateful | None = None, scaler: Stateful | None = None,
               loader: Loader | None = None) -> None:
        """What a checkpoint holds besides RNG and counters."""
        self._attached = TrainState(model, optimizer, scheduler, scaler, loader)
        if self.faults.fault is not None and self.faults.fault.point == "bitflip":
            self._injector.install(model, optimizer)
        watch_consumed(self.sdc, model, optimizer, lambda: self._next_step)

    # -- the step path -----------------------------------------------------------------

    def step(self, step: int, *, loss: float | None, tokens: int, loss_tokens: int,
             step_time_s: float, input_wait_s: float, cursor: Cursor | None = None) -> None:
        """Report a finished optimizer step (never blocks on Kafka) and checkpoint when due."""
        self._check_fence()
        self._apply_commits()
        for background in (self._persister, self._replicator):
            if background is not None:
                background.check()
        self._detect(step, loss)
        self._next_step = step + 1
        self.tokens += tokens
        self.loss_tokens += loss_tokens
        self.reporter.step = step
        if self.coordinator:
            self.reporter.report(StepCommitted(
                header=self.reporter.header(f"step/{step}"), step=step, tokens=tokens,
                loss_tokens=loss_tokens, step_time_ms=step_time_s * 1000.0,
                input_wait_ms=input_wait_s * 1000.0,
                loss=None if loss is None else float(loss)))
        self._times.append((step, step_time_s * 1000.0, input_wait_s * 1000.0))
        due = step - self.last_checkpoint_step >= self.interval_steps
        if due or len(self._times) >= STEP_TIMES_BATCH:
            self._report_times()
        self.faults.stepped(step)
        if due:
            self.checkpoint(step, cursor)

    def _detect(self, step: int, loss: float | None) -> None:
        if self.sdc is not None and self._attached is not None:
            detect(self.sdc, self._attached.model, self._attached.optimizer, self.reporter,
                   self.control, coordinator=self.coordinator, step=step, loss=loss)

    def _check_fence(self) -> None:
        """A fenced generation stops before it steps or writes shards again: the controller
        refuses its facts anyway, but its writes would land in storage (drills test it)."""
        fence = self.watcher.fence
        if not fence.accepted and not self.faults.ignore_fence:
            raise Fenced(self.env.generation, fence.reason, fence.detail)

    def _report_times(self) -> None:
        times, self._times = self._times, []
        self.reporter.step_times(times)

    # -- checkpoint --------------------------------------------------------------------

    def checkpoint(self, step: int, cursor: Cursor | None = None) -> None:
        """Collective: take checkpoint ``step`` (sync: committed when this returns)."""
        self._check_fence()
        start = time.monotonic()
        waited = 0.0
        if self._persister is not None:
            full = self.control.max(int(self._persister.pending >= self.ckpt.backlog))
            if full and self.ckpt.backlog_policy == "skip":
                if self.coordinator:
                    self.reporter.report(CheckpointSkipped(
                        header=self.reporter.header(f"ckpt/{step}/skipped"), step=step,
                        reason="backlog_full", backlog=self._persister.pending))
                self.last_checkpoint_step = step
                return
            if full:
                self._persister.wait_for_room()
                waited = time.monotonic() - start
        state = self._train_state().state_dict(self.rank)
        staged = self._persister.staging.stage(state) if self._persister is not None else None
        state = staged.value if staged is not None else state  # reused host buffers if async
        self.faults.hit("staging", step)
        self.last_checkpoint_step = step
        fields = ManifestFields(
            dataset_id=(cursor.dataset_id if cursor is not None else None)
            or self.ckpt.dataset_id,
            data=cursor.state_dict() if cursor is not None else None,
            counters={"step": step, "tokens": self.tokens, "loss_tokens": self.loss_tokens},
            code_version=self.ckpt.code_version, parent_digest=self._parent)
        if self._persister is None:
            self._commit(step, state, fields, cursor)
            self._staged(step, "sync", time.monotonic() - start, waited, state)
            return
        self._staged(step, "async", time.monotonic() - start, waited, state)
        self._persister.submit(lambda: self._commit(step, state, fields, cursor), staged)

    def _staged(self, step: int, mode: str, stall_s: float, waited_s: float,
                state: dict[str, Any]) -> None:
        if self.coordinator:
            self.reporter.report(CheckpointStaged(
                header=self.reporter.header(f"ckpt/{step}/staged"), step=step, mode=mode,
                stall_ms=stall_s * 1000.0, waited_ms=waited_s * 1000.0, bytes=nbytes(state),
                backlog=self._persister.pending if self._persister else 0,
                durable_step=self.durable_step))

    def _commit(self, step: int, state: dict[str, Any], fields: ManifestFields,
                cursor: Cursor | None) -> None:
        root = self.ckpt.root
        if root is None:
            raise StorageFault("checkpointing", "no checkpoint root: set checkpoint.root in the"
                               " spec or RUNLEDGER_CHECKPOINT_ROOT")
        ckdir = CheckpointDir(root, self.env.run_id, self.env.generation, step)
        shards: list[FileEntry] = []
        required = self._train_state().model_keys()
        try:
            written = write_checkpoint(ckdir, state, self.comm, required_keys=required,
                                       fields=fields, faults=self.faults, on_shard=shards.append)
        except StorageFault as exc:
            self.reporter.report(CheckpointWriteFailed(
                header=self.reporter.header(f"ckpt/{step}/failed"), step=step,
                logical_id=self.env.logical_id, stage=stage_of(exc.stage), detail=exc.detail))
            self.reporter.flush()
            raise
        for entry in shards:
            self.reporter.report(ShardWritten(
                header=self.reporter.header(f"ckpt/{step}/shard/{entry.path}"), step=step,
                logical_id=self.env.logical_id, path=ckdir.file(entry.path), bytes=entry.bytes,
                crc32c=entry.crc32c))
        self.reporter.flush()  # every rank's shards are on the log before the proposal
        self.comm.barrier()
        outcome: tuple[bool, str, str, int | None] = (False, "", "", None)
        if self.coordinator:
            self.faults.hit("after_manifest", step)
            outcome = self._propose(step, written.manifest_url, written.digest,
                                    fields.dataset_id, cursor)
        committed, reason, detail, interval = self.comm.broadcast(outcome)
        if interval is not None:
            self.interval_steps = interval  # every rank switches at the same boundary
        if not committed:
            raise CheckpointRejected(step, reason, detail)
        self._parent = written.digest
        self.durable_step = step
        self._commits.append((step, cursor))
        self.faults.hit("after_commit", step)
        if shards:
            self.faults.truncate(step, ckdir.file(shards[0].path))
        if self._replicator is not None:
            self._replicator.submit(written, time.monotonic())
        if self.coordinator:
            self._collect_garbage()

    def _propose(self, step: int, manifest_url: str, digest: str, dataset_id: str | None,
                 cursor: Cursor | None) -> tuple[bool, str, str, int | None]:
        """Coordinator: propose the written checkpoint (with the data cursor it
        holds) and wait for the controller's verdict; the outcome every rank gets."""
        epoch = position = counts = targets = None
        if cursor is not None:
            epoch, position, counts = cursor.epoch, cursor.position, cursor.source_counts()
            targets = self._train_state().mixture_targets()
        proposal = ManifestProposed(
            header=self.reporter.header(f"ckpt/{step}/proposed"), step=step,
            manifest_path=manifest_url, manifest_digest=digest, dataset_id=dataset_id,
            epoch=epoch, position=position, source_counts=counts, mixture_targets=targets)
        self.reporter.report(proposal)
        self.reporter.flush()
        verdict = self.watcher.wait_verdict(proposal.header.event_id, digest, VERDICT_TIMEOUT_S)
        return verdict.accepted, verdict.reason, verdict.detail, self.watcher.interval_steps

    def _collect_garbage(self) -> None:
        """One bounded GC pass over every tier in the background (``worker.tiers``)."""
        if self._gc is not None and self._gc.is_alive():
            return
        pinned = self._replicator.pinned() if self._replicator is not None else frozenset()
        self._gc = gc_thread(self.env.bootstrap, self.env.run_id, self.tiers, self.ckpt.keep_last,
                             self.ckpt.keep_every, pinned)

    def _apply_commits(self) -> None:
        """Advance the loader's durable cursor for checkpoints the log committed."""
        loader = self._attached.loader if self._attached is not None else None
        while self._commits:
            _, cursor = self._commits.pop(0)
            if cursor is not None and loader is not None:
                loader.commit(cursor)

    # -- restore -----------------------------------------------------------------------

    def restore(self) -> int:
        """Load the newest committed checkpoint that verifies; the step to continue after."""
        candidates = attempts([restoring.Candidate(s, p, d)
                               for s, p, d in self.ckpt.candidates[: self.ckpt.rollback_window]],
                              self.tiers, self.ckpt.failure_domain)
        if not candidates:
            return 0
        start = time.monotonic()
        refusals = Refusals(candidates)

        def rejected(c: restoring.Candidate, exc: VerificationFailed) -> None:
            whole = refusals.add(c, exc)  # None while another tier may hold this step
            if self.coordinator and whole is not None:
                self.reporter.report(CheckpointVerificationFailed(
                    header=self.reporter.header(f"restore/{c.step}/rejected"), step=c.step,
                    manifest_path=c.manifest_url, manifest_digest=c.manifest_digest,
                    logical_id=self.env.logical_id, reason=whole.reason, detail=whole.detail))
                self.reporter.flush()

        chosen, manifest, fell_back = restoring.choose(
            candidates, self.comm, run_id=self.env.run_id, dataset_id=self.ckpt.dataset_id,
            on_rejected=rejected)
        verified = time.monotonic()
        attached = self._train_state()
        template = attached.state_dict(self.rank)
        own_rng = rng_key(self.rank)
        if not any(k.startswith(own_rng + ".") for k in manifest.keys):
            del template[own_rng]  # a rank the checkpoint did not have (world size grew)
        restoring.load(chosen, template, self.comm)
        attached.load_state_dict(template)
        if own_rng in template:
            rng.restore(template[own_rng])
        else:
            # A stable seed: Python's hash() of a str differs from process to process.
            rng.seed_all(derive_key(self.env.run_id, self.rank, manifest.step) & 0x7FFFFFFF)
        if attached.loader is not None and manifest.data is not None:
            attached.loader.load_state_dict(manifest.data)
        self.tokens = manifest.counters.get("tokens", 0)
        self.loss_tokens = manifest.counters.get("loss_tokens", 0)
        self.last_checkpoint_step = manifest.step
        self._next_step = manifest.step + 1
        self.durable_step = manifest.step
        self._parent = chosen.manifest_digest
        self.reporter.step = manifest.step
        self.reporter.report(CheckpointRestored(
            header=self.reporter.header(f"restore/{manifest.step}/loaded"), step=manifest.step,
            manifest_path=chosen.manifest_url, manifest_digest=chosen.manifest_digest,
            logical_id=self.env.logical_id, verify_ms=(verified - start) * 1000.0,
            load_ms=(time.monotonic() - verified) * 1000.0, fell_back=fell_back,
            tier=chosen.tier))
        return manifest.step

    # -- state -------------------------------------------------------------------------

    def _train_state(self) -> TrainState:
        if self._attached is None:
            raise WorkerError("attach(model=...) before restore() or checkpoint()")
        return self._attached


"""The controller process: the thin shell around ``controller.reconcile``.

Start-up order matters: ``init_transactions`` first, which fences any older
controller with the same transactional id and aborts its open transaction; only
then is ``runledger.runs`` read (``read_committed``) to rebuild the model, so
the model cannot miss a fact a zombie was still committing. Then the loop:
consume requests and reports (an agent's report only under its node's key,
``events.kafka.reportdoor``), fold what the tail of ``runs`` and the agents'
node records bring (``controller.follow``, ``controller.ownership``),
``handle`` each input, ``tick`` the clock (every ``tick_s``, not every cycle),
and append every fact and command together with the input offsets in one
transaction. Each fact is signed and chained to its run's previous fact, each
command signed (``controller.chains``), with the controller's key; without one
(``signing_key=None``) they go out unsigned. Operator requests are believed
only when signed (``controller.signatures``) unless
``require_signatures=False`` (``--trust-unsigned``), which is logged as a
warning at start (``controller.trust``) and shown on every scrape
(``LoopStats.trusts_unsigned``). Right after each commit it observes, for every
report of the cycle, the wait from the report to that commit
(``controller.latency``).

Any number of controllers (any transactional ids) share one consumer group:
each decides only for the runs of the partitions the group gave it, from the
moment it has read ``runs`` up to where those partitions ended at the
assignment. The transaction carries the group's generation (exactly-once v2),
so one that lost its partitions in a rebalance it has not joined yet cannot
commit: its transaction is aborted, and it rebuilds its model and reads its
inputs again (docs/architecture.md §7).

Tested in tests/e2e/test_controller.py and tests/controller/test_metrics.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from controller import manifests, narrate
from controller.chains import Chains, Outgoing, outgoing
from controller.changelog import Changelog
from controller.evidence import EvidenceReader
from controller.fit import VersionOf, too_large
from controller.follow import Follower, held, partition_count
from controller.gates import EMPTY as NO_GATES
from controller.guard import Encode, Problem, encoded, refuse_input, take_input, take_tick
from controller.latency import Histogram, report_delays
from controller.model import Model, NodePolicy, PlanOf
from controller.ownership import Ownership, assign, catch_up, follow
from controller.signatures import RequestJudge
from controller.trust import Trust
from events.codec import Codec, default_codec
from events.errors import Fenced, KafkaOperationError, ProducerFenced
from events.kafka.clients import EventProducer, Quarantine
from events.kafka.consume import EventConsumer
from events.kafka.statuslog import read_status, status_partitions
from events.kafka.transactions import TransactionalWriter
from events.limits import TOO_LARGE
from events.model import node_key
from events.record import Record
from events.signed.signing import SigningKey
from events.topics import COMMANDS, REPORTS, REQUESTS, RUNS, STATUS

# librdkafka waits a fixed 20 ms before retrying a transaction call the coordinator
# answers CONCURRENT_TRANSACTIONS, which it does while the previous commit's
# markers are still being written: a transaction begun within ~2 ms of the last
# commit took 13 ms more at the median (bench/controller.py, docs/performance.md
# "Performance"). Holding a new transaction back for what is left of this gap
# costs a few ms and saves that retry.
TXN_GAP_S = 0.006

log = logging.getLogger("runledger.controller")

DEFAULT_TRANSACTIONAL_ID = "runledger-controller"
DEFAULT_GROUP = "runledger-controller"
# The controller's signing key file (PEM, as ``events.signed.signing.SigningKey.save`` writes it).
ENV_SIGNING_KEY = "RUNLEDGER_SIGNING_KEY"
FENCED_EXIT = 3
# How long a transaction may stay open before the broker aborts it. A killed
# controller's open transaction holds back every read_committed reader of its
# partitions (and the next owner's takeover) until then; the controller's own
# transactions last one commit.
DEFAULT_TRANSACTION_TIMEOUT_S = 60.0
_INPUTS = (REQUESTS, REPORTS)


def is_node_key(key: str) -> bool:
    return key.startswith(node_key(""))


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class LoopStats:
    """What the loop has done since this process started, for ``controller.metrics``.

    Written by the loop thread only; a scrape thread reads single fields, each
    read atomic, and a scrape that straddles one cycle is harmless.
    """

    inputs: int = 0
    facts: int = 0
    commands: int = 0
    ticks: int = 0
    # The wall time of the last cycle: handling its inputs, the tick, and the commit.
    last_tick_s: float = 0.0
    # Started --trust-unsigned: unsigned requests are taken on the broker's word. Kept
    # here so every scrape shows it (controller.metrics), not only the start-up log.
    trusts_unsigned: bool = False
    # Per report, from its occurred_at to the commit of its consequences (controller.latency).
    report_to_fact: Histogram = field(default_factory=Histogram)


class ControllerService:
    def __init__(
        self,
        bootstrap: str,
        plan_of: PlanOf,
        *,
        transactional_id: str = DEFAULT_TRANSACTIONAL_ID,
        group_id: str = DEFAULT_GROUP,
        tick_s: float = 0.25,
        clock: Callable[[], int] = wall_ms,
        transaction_timeout_s: float = DEFAULT_TRANSACTION_TIMEOUT_S,
        signing_key: SigningKey | None = None,
        require_signatures: bool = True,
        node_policy: NodePolicy | None = None,
        txn_gap_s: float = TXN_GAP_S,
        allowed_roots: Sequence[str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        # Where the controller may write files (controller.roots); None: no limit.
        self.allowed_roots = tuple(allowed_roots) if allowed_roots is not None else None
        self.plan_of = plan_of
        self.transactional_id = transactional_id
        self.group_id = group_id
        self.tick_s = tick_s
        self.txn_gap_s = txn_gap_s
        self._committed_at = 0.0  # time.monotonic() of the last commit
        self._next_tick = 0.0  # time.monotonic() from which the next tick is due
        self.clock = clock
        self.transaction_timeout_s = transaction_timeout_s
        self.model: Model | None = None
        self.ownership: Ownership | None = None
        self._assignments = 0  # the consumer's assignments count this loop has taken in
        self._misplaced: set[str] = set()
        self._encode: Encode = default_codec().encode  # the writer's codec, once it exists
        self._version_of = _newest(default_codec())
        self.chains = Chains(signing_key, transactional_id)
        self.require_signatures = require_signatures
        self.trust = Trust(bootstrap, transactional_id, require_signatures=require_signatures,
                           model=lambda: self.model)
        self.requests: RequestJudge | None = None
        self.evidence: EvidenceReader | None = None
        self.stats = LoopStats(trusts_unsigned=not require_signatures)
        self.changelog = Changelog(False, 1)
        self.node_policy = node_policy or NodePolicy()

    def run(self, stop: threading.Event | None = None) -> int:
        """Run until ``stop`` is set (exit 0) or a newer controller fences this one."""
        stop = stop or threading.Event()
        writer = TransactionalWriter(self.bootstrap, self.transactional_id, config={
            "transaction.timeout.ms": int(self.transaction_timeout_s * 1000)})
        try:
            writer.init()
        except ProducerFenced as exc:
            log.error("%s", exc)
            return FENCED_EXIT
        self._encode = writer.codec.encode
        self._version_of = _newest(writer.codec)
        partitions = partition_count(self.bootstrap)
        status_parts = status_partitions(self.bootstrap, f"{self.transactional_id}-status")
        self.changelog = Changelog(status_parts is not None, partitions,
                                   aligned=status_parts == partitions)
        if status_parts is None:
            log.warning("topic %s does not exist (a cluster set up by an older runledger): "
                        "no status summaries are written, and `runledger status` folds %s; "
                        "`runledger stack up` creates it", STATUS, RUNS)
        door = self.trust.report_door()
        follower = Follower(self.bootstrap, self.transactional_id, self.plan_of, door)
        self.model = replace(follower.replay(self.clock(), self.chains),
                             node_policy=self.node_policy)
        log.info("rebuilt %d runs from %s", len(self.model.runs), RUNS)
        self.ownership = Ownership(self.transactional_id, partitions)
        self.requests = self.trust.start(self.chains)
        # Gate evidence from every partition, read up to now before any admission.
        self.evidence = EvidenceReader(self.bootstrap, self.transactional_id,
                                       self.requests.judge)
        self.model = replace(self.model, gates=self.evidence.catch_up())
        quarantine = Quarantine(EventProducer(self.bootstrap, client_id="controller-quarantine"))
        # Static membership under the fencing identity: a restarted controller
        # takes over its predecessor's partitions at once instead of waiting
        # out a session timeout, during which it would hear no heartbeats. The
        # range assignor gives partition p of requests and of reports to one
        # member, which therefore owns the runs of partition p.
        consumer = EventConsumer(
            self.bootstrap, self.group_id, list(_INPUTS), quarantine=quarantine,
            admit=door.admit, hold_assigned=True, raw=True,
            config={"group.instance.id": self.transactional_id, "session.timeout.ms": 10_000,
                    "partition.assignment.strategy": "range"})
        try:
            while not stop.is_set():
                self._cycle(consumer, follower, writer)
        except Fenced:
            log.error(
                "fenced: another controller with transactional id %r has taken over; "
                "this one stops without writing anything more", self.transactional_id)
            return FENCED_EXIT
        finally:
            consumer.close()
            follower.close()
            self.evidence.close()
        return 0

    def _cycle(self, consumer: EventConsumer, follower: Follower,
               writer: TransactionalWriter) -> None:
        """One turn of the loop: inputs, the tail, ownership, decisions, one transaction."""
        assert self.model is not None and self.ownership is not None
        records = self._inputs(consumer)
        self.trust.refresh(records)
        started = time.monotonic()
        now = self.clock()
        own = self._reassigned(consumer, follower, self.ownership)
        facts, nodes = follower.read()
        self.chains.observe(facts, own=False)
        model, own, followed = follow(self.model, facts, nodes, own, now, self.plan_of)
        if self.evidence is not None:
            book = self.evidence.read()
            model = model if book is model.gates else replace(model, gates=book)
        out = outgoing(encoded(followed, self._encode))
        own, ready = catch_up(own, follower.positions())
        if ready:
            # Missing heartbeats count only from the moment this controller owns a
            # run, so a takeover does not fail healthy runs it has not heard from.
            model = replace(model, since=now)
            consumer.resume(held(_INPUTS, ready))
            log.info("deciding for partitions %s", sorted(ready))
        for fresh in own.foreign.keys() - self.ownership.foreign.keys():
            log.error("run %s: another writer (%s) appends facts to it; this controller "
                      "no longer decides for it", fresh, own.foreign[fresh])
        for record in records:
            rid = record.event.run_id
            if not own.owns(rid) and not is_node_key(rid) and rid not in own.foreign \
                    and rid not in self._misplaced:
                self._misplaced.add(rid)  # said once per run: a misplaced producer is steady
                log.warning("input %s of run %s on %s[%d] is not this controller's to "
                            "decide (another partitioner?); left to its owner",
                            record.event.event_type, record.event.run_id, record.topic,
                            record.partition)
            refusal = (self.requests.judge(record)
                       if self.requests is not None and own.owns(rid) else None)
            if refusal is not None:
                model, produced = refuse_input(model, record.event, now, self.plan_of,
                                               self._encode, *refusal)
                out += outgoing(produced, record)
                log.error("run %s: %s refused: %s", rid, record.event.event_type, refusal[1])
                continue
            model, taken = self._take(model, record, now, own)
            out += taken
        model, ticked = self._tick(model, now, own)
        out += ticked
        self.ownership = own
        out += self._summaries(model, out, facts, ready, now)
        if (out or records) and not self._commit(out, consumer, follower, writer, now):
            return
        self.stats.report_to_fact.observe_all(report_delays(records, self.clock()))
        self.model = model
        manifests.write_published(model, (o.event for o in out if o.topic == RUNS),
                                  self.allowed_roots)
        self._count(len(records), out, time.monotonic() - started)

    def _tick(self, model: Model, now: int, own: Ownership) -> tuple[Model, list[Outgoing]]:
        """The clock's decisions, every ``tick_s`` and not every cycle: under a steady
        stream of inputs a cycle follows a cycle, and reconciling every live run each
        time was most of a controller's CPU with 1,000 live runs (bench/cluster.py)."""
        if time.monotonic() < self._next_tick:
            return model, []
        self._next_tick = time.monotonic() + self.tick_s
        model, produced, problems = take_tick(model, now, self.plan_of, self._encode, own.owns)
        for problem in problems:
            _log_problem(problem, None)
        return model, outgoing(produced)

    def _take(self, model: Model, record: Record, now: int,
              own: Ownership) -> tuple[Model, list[Outgoing]]:
        """One input taken (``take_input``); refused instead when what it appends would
        not fit one record, which the producer would refuse, aborting every transaction."""
        rid = record.event.run_id
        new, produced, problem = take_input(model, record.event, record.topic, now,
                                            self.plan_of, self._encode, own.owns)
        taken = outgoing(produced, record)
        big = self._too_large(taken)
        if big is not None:
            new, produced = refuse_input(model, record.event, now, self.plan_of,
                                         self._encode, TOO_LARGE, big)
            taken, problem = outgoing(produced, record), (rid, TOO_LARGE, big)
        if problem is not None:
            _log_problem(problem, record)
        return new, taken

    def _too_large(self, records: list[Outgoing]) -> str | None:
        """Why one of an input's records would not fit one Kafka record (``controller.fit``)."""
        key = self.chains.key
        return too_large(records, self.transactional_id, key.key_id if key else None,
                         self._version_of)

    def _inputs(self, consumer: EventConsumer) -> list[Record]:
        """Wait for inputs until the next tick is due; none goes into a transaction sooner
        than ``txn_gap_s`` after the last commit (``TXN_GAP_S`` says why)."""
        records = consumer.poll(min(self.tick_s, max(0.0, self._next_tick - time.monotonic())))
        early = self._committed_at + self.txn_gap_s - time.monotonic()
        if records and early > 0:  # what arrives meanwhile joins this transaction
            time.sleep(early)
            records += consumer.poll(0)
        return records

    def _commit(self, out: list[Outgoing], consumer: EventConsumer, follower: Follower,
                writer: TransactionalWriter, now: int) -> bool:
        """Sign and append ``out`` with the input offsets in one transaction; whether
        it committed (if not, the model and the chains' heads are rebuilt)."""
        if self.requests is not None:  # the keys head the facts name: the ring judged by
            self.chains.keys_head = self.requests.ring.head
        signed, moved = self.chains.sign(out)
        try:
            with writer.transaction() as tx:
                for o in signed:
                    tx.send(o.topic, o.event, o.value, o.headers, o.version)
                tx.send_offsets(consumer.positions(), consumer.group_metadata())
        except KafkaOperationError as exc:
            self._refused(exc, consumer, follower, now)
            return False
        self._committed_at = time.monotonic()
        self.chains.advance(moved)
        self.changelog.committed(out)
        for o in signed:
            log.log(*narrate.line(o.topic, o.event))
        return True

    def _summaries(self, model: Model, out: list[Outgoing], facts: list[Record],
                   ready: frozenset[int], now: int) -> list[Outgoing]:
        """The status summaries this cycle changed, for the runs this controller decides
        for; every run of partitions it has just started deciding for, once."""
        if not self.changelog.enabled:
            return []
        assert self.ownership is not None
        touched = [o.event.run_id for o in out] + [r.event.run_id for r in facts]
        if ready:
            self.changelog.seed(read_status(
                self.bootstrap, partitions=ready if self.changelog.aligned else None,
                name=f"{self.transactional_id}-status"))
            touched += self.changelog.caught_up(model, ready)
        return self.changelog.pending(model, touched, self.ownership.owns, now)

    def _reassigned(self, consumer: EventConsumer, follower: Follower,
                    own: Ownership) -> Ownership:
        """The ownership after any rebalance the last poll went through."""
        if consumer.assignments == self._assignments:
            return own
        self._assignments = consumer.assignments
        parts = frozenset(p for t, p in consumer.assignment if t == REPORTS) & frozenset(
            p for t, p in consumer.assignment if t == REQUESTS)
        ends = follower.ends(parts)
        log.info("assigned partitions %s; deciding for them once %s is read up to %s",
                 sorted(parts), RUNS, {p: ends[p] for p in sorted(ends)})
        return assign(own, parts, ends)

    def _refused(self, exc: KafkaOperationError, consumer: EventConsumer, follower: Follower,
                 now: int) -> None:
        """A transaction that did not commit (aborted): most often the group moved on
        (a rebalance this member has not joined yet), so its partitions may be another's.

        Nothing of it reached the log, so the model, which already holds its facts,
        is rebuilt from ``runs``, and the inputs are read again from the committed
        offsets (the next poll also joins the new assignment)."""
        log.warning("transaction refused (%s): rebuilding the model from %s and reading "
                    "the inputs again from the committed offsets", exc, RUNS)
        consumer.rewind()
        self.model = replace(follower.replay(now, self.chains), node_policy=self.node_policy,
                             gates=self.model.gates if self.model is not None else NO_GATES)
        self._assignments = -1  # decide again only once caught up with the new end

    def _count(self, inputs: int, out: list[Outgoing], took_s: float) -> None:
        stats = self.stats
        stats.inputs += inputs
        stats.facts += sum(1 for o in out if o.topic == RUNS)
        stats.commands += sum(1 for o in out if o.topic == COMMANDS)
        stats.ticks += 1
        stats.last_tick_s = took_s


def _newest(codec: Codec) -> VersionOf:
    """The schema version ``codec`` writes an event type with."""
    return lambda event_type: codec.registry.latest(event_type).version


def _log_problem(problem: Problem, record: Record | None) -> None:
    run_id, reason, error = problem
    where = f" ({record.topic}[{record.partition}]@{record.offset})" if record else ""
    log.error("run %s: %s%s: %s; recorded, and every other run goes on",
              run_id, reason, where, error)

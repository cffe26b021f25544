"""What ``runledger preflight`` concludes from what it observed: rows and a verdict. Pure.

The shell (``runledger.rehearse.preflightio``) observes: the live nodes, this client's
software, a probe object written to and read from each checkpoint root, the
dataset's objects, the topics, CUDA. The rules here turn each observation into
rows (``events.model.PreflightCheck``: a check, the thing checked, a verdict,
a figure, a threshold, a unit and a reason naming the thing) and the rows into
one verdict:

1. agents: the live, placeable nodes hold enough free slots for the spec's
   world (its ``min`` for an elastic run), each counting at most
   ``slots_per_node`` and only nodes in the spec's ``domain`` when it names one;
2. software: every live node that reports its versions (``AgentRegistered`` v3)
   runs one Python and one torch version (the figure: how many versions); a
   fail names each version and its nodes; skipped when no node reports any;
3. storage: per root, a failed probe fails naming the root and the error; else
   write and read bandwidth (MB/s, at least the threshold) and latency (s, at
   most the threshold);
4. data: an unresolved manifest fails; every object must exist with its listed
   size (a failing row per bad object, naming it, then one summary row); the
   sampled digests must match;
5. telemetry: every topic exists; clock skew is skipped with its reason;
6. devices: skipped without CUDA, saying so;
7. the verdict is ``fail`` when any row failed, else ``pass`` (skips do not fail).

Tested in tests/runledger/rehearse/test_preflight.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.spec.parts import ElasticMembership
from controller.spec.runspec import RunSpec
from events.model import PreflightCheck

PASS, FAIL, SKIP = "pass", "fail", "skip"
MB = 1_000_000


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The bounds a figure is judged against; the defaults suit a local disk under load."""

    write_mb_s: float = 5.0
    read_mb_s: float = 5.0
    latency_s: float = 2.0
    probe_bytes: int = 4 * 1024 * 1024  # the spec records no state size: a fixed probe
    digest_sample: int = 3


@dataclass(frozen=True, slots=True)
class Need:
    """What the spec asks of the nodes: members, at most ``per_node`` on one node."""

    members: int
    per_node: int
    domain: str | None
    elastic: bool


@dataclass(frozen=True, slots=True)
class NodeSeen:
    """A live node: its free slots, domain, and the versions its agent reported ("": none)."""

    name: str
    free: int
    domain: str
    python: str = ""
    torch: str = ""


@dataclass(frozen=True, slots=True)
class StorageSeen:
    """One checkpoint root probed: an error, or the seconds each operation took."""

    root: str
    error: str | None = None
    size: int = 0
    write_s: float = 0.0
    read_s: float = 0.0
    latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ObjectSeen:
    """One dataset object: its size found (None: absent), the error, its digest if sampled."""

    url: str
    size: int
    found: int | None
    error: str | None = None
    digest_ok: bool | None = None  # None: not in the sample


@dataclass(frozen=True, slots=True)
class DataSeen:
    dataset: str
    error: str | None
    objects: tuple[ObjectSeen, ...] = ()


@dataclass(frozen=True, slots=True)
class Seen:
    """Everything the shell observed for one spec."""

    nodes: tuple[NodeSeen, ...]
    python: str
    torch: str | None
    storage: tuple[StorageSeen, ...]
    data: DataSeen
    missing_topics: tuple[str, ...]
    topics: int
    cuda_devices: int  # 0 without CUDA (or without torch)


def need_of(spec: RunSpec) -> Need:
    m = spec.membership
    replicas = m.min if isinstance(m, ElasticMembership) else spec.topology.replicas
    t = spec.topology
    return Need(members=replicas * t.ranks_per_replica, per_node=t.slots_per_node,
                domain=t.domain, elastic=isinstance(m, ElasticMembership))


def sample(count: int, n: int) -> list[int]:
    """Up to ``n`` distinct indices of ``count`` objects spread evenly, first and last included."""
    if count <= 0 or n <= 0:
        return []
    if n >= count:
        return list(range(count))
    if n == 1:
        return [0]
    return sorted({round(i * (count - 1) / (n - 1)) for i in range(n)})


def _row(check: str, subject: str, verdict: str, figure: float | None,
         threshold: float | None, unit: str, reason: str) -> PreflightCheck:
    return PreflightCheck(check, subject, verdict, figure, threshold, unit, reason)


def agents_rows(need: Need, nodes: Sequence[NodeSeen]) -> list[PreflightCheck]:
    """Rule 1: enough free slots on live nodes, at most ``per_node`` counted per node."""
    usable = [n for n in nodes if need.domain is None or n.domain == need.domain]
    capacity = sum(min(n.free, need.per_node) for n in usable)
    what = f"{need.members} members{' (elastic min)' if need.elastic else ''}, at most " \
           f"{need.per_node} per node{f' in domain {need.domain}' if need.domain else ''}"
    if capacity >= need.members:
        reason = f"live nodes ({len(usable)}) hold {capacity} usable free slots for {what}"
        return [_row("agents", "nodes", PASS, capacity, need.members, "slots", reason)]
    names = ", ".join(f"{n.name}:{n.free}" for n in usable) or "none"
    reason = (f"live nodes hold {capacity} usable free slots; the spec needs {what}"
              f" (free slots per live node: {names}); start agents (`runledger agent`) or"
              " wait for runs to end")
    return [_row("agents", "nodes", FAIL, capacity, need.members, "slots", reason)]


def software_rows(nodes: Sequence[NodeSeen], python: str, torch: str | None
                  ) -> list[PreflightCheck]:
    """Rule 2: one Python and one torch version on every live node that reports them."""
    mine = f"this client runs Python {python}, torch {torch or 'not installed'}"
    reporting = [n for n in nodes if n.python]
    silent = [n.name for n in nodes if not n.python]
    quiet = (f"; {len(silent)} nodes report no versions (agents older than AgentRegistered"
             f" v3): {', '.join(silent)}" if silent else "")
    if not reporting:
        return [_row("software", "nodes", SKIP, None, None, "",
                     f"no live node reports its versions, so none can be compared{quiet};"
                     f" {mine}")]
    rows = []
    for check, field in (("software.python", "python"), ("software.torch", "torch")):
        found: dict[str, list[str]] = {}
        for n in reporting:
            found.setdefault(getattr(n, field), []).append(n.name)
        listed = "; ".join(f"{v}: {', '.join(names)}" for v, names in sorted(found.items()))
        ok = len(found) == 1
        reason = (f"{len(reporting)} nodes run {listed}" if ok else
                  f"the nodes differ: {listed}; install one version everywhere") + quiet
        rows.append(_row(check, "nodes", PASS if ok else FAIL, len(found), 1, "versions",
                         f"{reason}; {mine}"))
    return rows


def storage_rows(seen: StorageSeen, limits: Thresholds) -> list[PreflightCheck]:
    """Rule 3: a failed probe names the root and the error; else bandwidth and latency."""
    if seen.error is not None:
        return [_row("storage.write", seen.root, FAIL, None, None, "",
                     f"checkpoint root {seen.root}: {seen.error}; the workers could not"
                     " write checkpoints there: fix its permissions or credentials, or"
                     " choose another root")]
    size_mb = seen.size / MB
    rows = []
    for check, secs, floor, what in (
            ("storage.write", seen.write_s, limits.write_mb_s, "wrote {} MB to"),
            ("storage.read", seen.read_s, limits.read_mb_s, "read {} MB back from")):
        # A probe too fast for the timer counts as the cap, never as infinity (JSON has none).
        rate = min(round(size_mb / secs, 2), 1e12) if secs > 0 else 1e12
        ok = rate >= floor
        rows.append(_row(check, seen.root, PASS if ok else FAIL, rate, floor, "MB/s",
                         f"{what.format(f'{size_mb:.1f}')} {seen.root} at {rate} MB/s"
                         f" ({'at least' if ok else 'below'} {floor} MB/s)"))
    ok = seen.latency_s <= limits.latency_s
    rows.append(_row("storage.latency", seen.root, PASS if ok else FAIL,
                     round(seen.latency_s, 4), limits.latency_s, "s",
                     f"a metadata call on {seen.root} took {seen.latency_s:.4f} s"
                     f" ({'within' if ok else 'over'} {limits.latency_s} s)"))
    return rows


def data_rows(seen: DataSeen) -> list[PreflightCheck]:
    """Rule 4: the manifest resolves, every object is there with its size, digests match."""
    if seen.error is not None:
        return [_row("data.manifest", seen.dataset, FAIL, None, None, "",
                     f"dataset {seen.dataset}: {seen.error}")]
    rows: list[PreflightCheck] = []
    good = 0
    for o in seen.objects:
        problem = _object_problem(o)
        if problem is None:
            good += 1
        else:
            rows.append(_row("data.object", o.url, FAIL, o.found, o.size, "bytes", problem))
    total = len(seen.objects)
    rows.append(_row("data.objects", seen.dataset, PASS if good == total else FAIL, good, total,
                     "objects", f"{good} of {total} objects of {seen.dataset} reachable with"
                     " their listed sizes"))
    sampled = [o for o in seen.objects if o.digest_ok is not None]
    bad = [o.url for o in sampled if not o.digest_ok]
    verified = len(sampled) - len(bad)
    rows.append(_row("data.digests", seen.dataset, FAIL if bad else PASS, verified,
                     len(sampled), "objects",
                     f"{verified} of {len(sampled)} sampled objects match their digests"
                     + (f"; mismatched: {', '.join(bad)}" if bad else "")))
    return rows


def _object_problem(o: ObjectSeen) -> str | None:
    if o.found is None:
        return (f"object {o.url} is missing ({o.error or 'not found'}); restore it or rebuild"
                " the dataset (`runledger dataset build`)")
    if o.found != o.size:
        return (f"object {o.url} holds {o.found} bytes, the manifest lists {o.size}; it changed"
                " after the dataset was built")
    return None


def telemetry_rows(missing: Sequence[str], topics: int) -> list[PreflightCheck]:
    """Rule 5: the topics exist; clock skew cannot be measured yet."""
    present = topics - len(missing)
    if missing:
        topic_row = _row("telemetry.topics", "broker", FAIL, present, topics, "topics",
                         f"topics missing: {', '.join(missing)}; create them"
                         " (`runledger stack up` or the cluster's topic job)")
    else:
        topic_row = _row("telemetry.topics", "broker", PASS, present, topics, "topics",
                         f"all {topics} topics exist and this principal read the reports and"
                         " runs topics")
    skew = _row("telemetry.clock", "broker", SKIP, None, None, "ms",
                "the topics keep the producer's CreateTime, so no broker clock is visible to a"
                " client: clock skew is not measured")
    return [topic_row, skew]


def device_rows(cuda_devices: int) -> list[PreflightCheck]:
    """Rule 6: CUDA and NCCL checks need CUDA; without it, say so."""
    if cuda_devices <= 0:
        return [_row("devices", "this machine", SKIP, 0, None, "devices",
                     "no CUDA on this machine: device count and NCCL not checked (a gloo"
                     " collective across the nodes is not run by this version either)")]
    return [_row("devices", "this machine", SKIP, cuda_devices, None, "devices",
                 f"{cuda_devices} CUDA devices here; the nodes' devices and NCCL are not"
                 " checked by this version")]


def plan(need: Need, seen: Seen, limits: Thresholds) -> list[PreflightCheck]:
    """Every row, in the order of the rules."""
    rows = [*agents_rows(need, seen.nodes),
            *software_rows(seen.nodes, seen.python, seen.torch)]
    for s in seen.storage:
        rows += storage_rows(s, limits)
    return [*rows, *data_rows(seen.data), *telemetry_rows(seen.missing_topics, seen.topics),
            *device_rows(seen.cuda_devices)]


def verdict(rows: Sequence[PreflightCheck]) -> str:
    """Rule 7: ``fail`` when any row failed, else ``pass``."""
    return FAIL if any(r.verdict == FAIL for r in rows) else PASS


def failing(rows: Sequence[PreflightCheck]) -> list[str]:
    """``check subject`` of every failed row, in order."""
    return [f"{r.check} {r.subject}" for r in rows if r.verdict == FAIL]


def lines(rows: Sequence[PreflightCheck]) -> list[str]:
    """The human table: verdict, check, figure against threshold, reason."""
    out = []
    for r in rows:
        fig = "-" if r.figure is None else f"{r.figure:g}"
        bound = "" if r.threshold is None else f"/{r.threshold:g}"
        out.append(f"{r.verdict.upper():<4}  {r.check:<17} {fig + bound + ' ' + r.unit:<22}"
                   f" {r.reason}")
    return out

"""The live view's answers: each page's JSON, put together from the feeds and the projection.

:class:`LiveView` holds the readers (``runledger.ui.feeds``) and answers what the
server routes to it; the shaping is ``runledger.ui.views`` (pure). Every answer
carries ``health``: how old the run summaries, the node rows and the
projection are, and what went wrong reading each, so the page can say so.
What the projection adds to the runs table (ETTR so far, the newest step seen)
is computed once per snapshot, not once per request.

Tested in tests/runledger/ui/test_api.py and tests/runledger/ui/test_server.py.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from events.status import RunStatusChanged
from queries.errors import QueryError
from runledger.ui import views
from runledger.ui.feeds import EXPECTED, Feed, Projection
from runledger.views import nodeview, statusview

# A summary older than this (the controller publishes progress every 10 s while a run
# is active, and the view reads every poll_s) is shown as behind.
STATUS_STALE_S = 30.0
NODES_STALE_S = 60.0
PROJECTION_STALE_S = 30.0
LOG_TAIL_LINES = 400
_STEPS = "SELECT run_id, max(step) FROM steps GROUP BY run_id"
_ENDED = "SELECT DISTINCT run_id FROM endings"
# A run's newest step row (its steps are on one partition, in offset order).
_LATEST = ("SELECT step, generation, loss, step_time_ms, input_wait_ms, tokens FROM steps"
           " WHERE run_id = ? ORDER BY part DESC, ofs DESC LIMIT 1")
RECENT_RUNS = 64  # run pages whose projection answers are kept


class Recent:
    """The last ``size`` answers by key (a run page's, per projection version)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], tuple[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> tuple[str, Any] | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str], value: tuple[str, Any]) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


@dataclass(frozen=True, slots=True)
class NotFound:
    message: str


Logs = Callable[[str, int | None, str | None, int], dict[str, Any]]


class LiveView:
    """Everything the pages ask for, from what the feeds last read."""

    def __init__(self, status: Feed[dict[str, RunStatusChanged]],
                 nodes: Feed[list[dict[str, Any]]], projection: Projection, logs: Logs,
                 clock: Callable[[], float] = time.time) -> None:
        self.status = status
        self.nodes_feed = nodes
        self.projection = projection
        self._logs = logs
        self._clock = clock
        self._cache_key: object = None
        self._cache: tuple[dict[str, float], dict[str, int]] = ({}, {})
        self._ended_ettr: dict[str, float] = {}
        self._per_run: Recent = Recent(RECENT_RUNS)

    # -- health ---------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        now = self._clock()
        status = self.status.reading().health(now, STATUS_STALE_S)
        nodes = self.nodes_feed.reading().health(now, NODES_STALE_S)
        try:
            with self.projection.use() as (_, fresh):
                proj = {"state": projection_state(fresh.age_s, fresh.projector_running),
                        **fresh.as_json(), "line": fresh.line(), "short": fresh.short()}
        except QueryError as exc:
            proj = {"state": "unreachable", "error": str(exc)}
        return {"now": now, "status": status, "nodes": nodes, "projection": proj}

    # -- runs -----------------------------------------------------------------------

    def _docs(self) -> dict[str, dict[str, Any]]:
        recs = self.status.reading().value or {}
        return {run: statusview.document(rec) for run, rec in recs.items()}

    def _projected(self, docs: dict[str, dict[str, Any]]
                   ) -> tuple[dict[str, float], dict[str, int]]:
        """ETTR so far and the newest step seen, per run, from the current snapshot.

        A live run's ETTR is computed again for each new snapshot; an ended run's
        once it is in one (its allocation has ended), so a long history costs its
        queries once, not every few seconds."""
        from queries.ettr import ettr
        try:
            with self.projection.use() as (con, fresh):
                key = (fresh.path, fresh.taken_at, fresh.snapshot)
                if key == self._cache_key and fresh.taken_at is not None:
                    return self._cache
                steps = {r: int(s) for r, s in con.execute(_STEPS).fetchall()}
                ended = set(con.execute(_ENDED).fetchall())
                ratios: dict[str, float] = {}
                for run_id, doc in docs.items():
                    if run_id in self._ended_ettr:
                        ratios[run_id] = self._ended_ettr[run_id]
                        continue
                    if run_id not in steps and doc["terminal"]:
                        continue  # never stepped: no productive time to show
                    ratio = ettr(con, run_id).ratio
                    if ratio is None:
                        continue
                    ratios[run_id] = ratio
                    if (run_id,) in ended and doc["terminal"]:
                        self._ended_ettr[run_id] = ratio
                self._cache, self._cache_key = (ratios, steps), key
        except (QueryError, *EXPECTED):
            return {}, {}
        return self._cache

    def runs(self) -> dict[str, Any]:
        docs = self._docs()
        rows, _ = views.shown(docs.values())
        ettr, steps = self._projected({d["run_id"]: dict(d) for d in rows})
        table = views.runs_table(docs.values(), ettr, steps, self._now_ms())
        return {**table, "health": self.health()}

    def run(self, run_id: str) -> dict[str, Any] | NotFound:
        doc = self._docs().get(run_id)
        if doc is None:
            self.status.poke()
            return NotFound(f"no run {run_id!r} on runledger.status yet: a run appears"
                            " once the controller has taken its submission (`runledger"
                            " runs` lists them)")
        proj = self._run_projection(run_id)
        latest = proj["latest"]
        page = views.run_page(doc, None if latest is None else latest["step"], proj["ettr"],
                              proj["alerts"], self._now_ms(), latest)
        return {**page, "health": self.health()}

    def _run_projection(self, run_id: str) -> dict[str, Any]:
        """What the run's live header takes from the projection: the newest step row,
        ETTR so far with its parts, and the alerts; once per projection version."""
        from queries.ettr import PARTS, ettr
        from queries.report_html import PART_COLORS
        from queries.runner import run_query
        try:
            with self.projection.use() as (con, _):
                version = self.projection.version
                hit = self._per_run.get(("header", run_id))
                if hit is not None and hit[0] == version:
                    return dict(hit[1])
                cur = con.execute(_LATEST, [run_id])
                names = [d[0] for d in cur.description or []]
                row = cur.fetchone()
                e = ettr(con, run_id)
                alerts = run_query(con, "alerts", run_id).records()
        except (QueryError, *EXPECTED):
            return {"latest": None, "ettr": None, "alerts": []}
        latest = dict(zip(names, row, strict=True)) if row is not None else None
        out = {"latest": latest, "alerts": alerts, "ettr": {
            "allocated_s": round(e.allocated_s, 3), "ratio": e.ratio,
            "parts": {k: round(v, 3) for k, v in e.parts_s.items()},
            "order": list(PARTS), "colors": {p: PART_COLORS[p] for p in PARTS}}}
        self._per_run.put(("header", run_id), (version, out))
        return out

    def run_sections(self, run_id: str, since: str | None) -> dict[str, Any] | NotFound:
        """The report's sections for a run, rendered once per projection version;
        ``unchanged`` when the page already shows that version (``since``)."""
        from queries.report import gather, sections_html
        try:
            with self.projection.use() as (con, fresh):
                version = self.projection.version
                if since is not None and since == version:
                    return {"unchanged": True, "stamp": version}
                hit = self._per_run.get(("sections", run_id))
                if hit is not None and hit[0] == version:
                    html = str(hit[1])
                else:
                    html = sections_html(gather(con, run_id, audit=False))
                    self._per_run.put(("sections", run_id), (version, html))
        except QueryError as exc:
            message = str(exc)
            if "unknown run" in message or "no run" in message:
                return NotFound(f"{message}; the projection may not have reached it yet")
            return {"unchanged": False, "stamp": None, "html": None, "error": message}
        return {"unchanged": False, "stamp": version, "html": html, "freshness": fresh.line()}

    # -- nodes and logs ---------------------------------------------------------------

    def nodes(self) -> dict[str, Any]:
        rows = self.nodes_feed.reading().value or []
        return {"nodes": views.nodes_table(rows, self._docs().values()),
                "health": self.health()}

    def log(self, run_id: str, generation: int | None, rank: str | None,
            tail: int = LOG_TAIL_LINES) -> dict[str, Any]:
        return self._logs(run_id, generation, rank, tail)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


def projection_state(age_s: float | None, projector_running: bool) -> str:
    """``ok`` while a projector publishes snapshots; ``behind`` when the newest is older
    than ``PROJECTION_STALE_S`` (a live log is always a few records ahead of a snapshot,
    so records behind alone say nothing); ``stopped`` when no projector runs."""
    if not projector_running:
        return "stopped"
    return "behind" if age_s is None or age_s > PROJECTION_STALE_S else "ok"


def node_rows(address: str) -> Callable[[], list[dict[str, Any]]]:
    """The nodes feed's read: ``runledger nodes``' rows, now."""

    def read() -> list[dict[str, Any]]:
        from runledger.nodelog import node_events
        return nodeview.rows(node_events(address), int(time.time() * 1000))

    return read


def status_reader(address: str) -> Callable[[], dict[str, RunStatusChanged]]:
    from events.kafka.statuslog import read_status

    def read() -> dict[str, RunStatusChanged]:
        return read_status(address, name="runledger-ui")

    return read


def log_reader(address: str, retry_s: float) -> Logs:
    """The log page's read: the member's last ``tail`` lines, wherever its agent put them
    on this machine, or where they are when this machine cannot read them."""

    def read(run_id: str, generation: int | None, rank: str | None,
             tail: int) -> dict[str, Any]:
        from agent.logfiles import LogStream, dropped
        from runledger.errors import RunledgerError
        from runledger.logfind import locate, run_facts, run_reader
        from runledger.views.logview import describe
        reader = run_reader(address, run_id, bounded=True, retry_s=retry_s, name="runledger-ui")
        try:
            facts = run_facts(reader, run_id)
            picked, path, _ = locate(address, run_id, facts, rank, generation, retry_s,
                                     name="runledger-ui")
        except (RunledgerError, *EXPECTED) as exc:
            return {"error": str(exc)}
        finally:
            reader.close()
        doc = {"run_id": run_id, "generation": picked.generation, "rank": picked.rank,
               "logical_id": picked.logical_id, "node": picked.node, "path": str(path),
               "member": describe(picked),
               "state": ("exited" if picked.exited is not None else
                         "running" if picked.live else "stopped with its group"),
               "exit_code": None if picked.exited is None else picked.exited.exit_code,
               "signal": None if picked.exited is None else picked.exited.signal}
        with LogStream(path, tail) as stream:
            if not stream.paths:
                return {**doc, "error": f"the log of {describe(picked)} is on node"
                                        f" {picked.node} at {path}, which the machine"
                                        " running `runledger ui` cannot read"}
            data = b"".join(iter(lambda: stream.read(1 << 16), b""))
        cut = dropped(path)
        text = codecs.decode(data, "utf-8", errors="replace")
        return {**doc, "text": text, "tail": tail,
                "dropped_bytes": cut.bytes if cut is not None else 0}

    return read


__all__ = ["LiveView", "NotFound", "log_reader", "node_rows", "status_reader"]

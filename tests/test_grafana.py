"""deploy/grafana/runledger.json: a well-formed dashboard that names only series runledger exports.

"Exported" is read from the components themselves, not from a list kept here:
the controller's collector (over a model holding a live run with heartbeats, a
checkpoint and open alerts, nodes in every state, and reports observed in its
report-to-fact histogram), the projector's (over a snapshot with lag, ETTR, a
published snapshot and SDC tallies) and a node agent's (over a snapshot with
heartbeats, busy slots, commands, exits and dropped log bytes) are served by
``runledger.metricsserver.MetricsServer``, as ``--metrics`` serves them, and
scraped over HTTP. Every metric name, label name (matchers, ``by``/``without``,
legends) and literal label value of every PromQL expression and template query
must be among what those scrapes expose; the one exception is Prometheus's own
``up``, whose ``job`` values must be the jobs of deploy/prometheus.yml.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentCollector
from agent.metrics import Snapshot as AgentSnapshot
from agent.stats import AgentStats
from controller.inventory import Inventory, Node
from controller.metrics import ControllerCollector
from controller.model import Model
from controller.ownership import Ownership
from controller.run_decide import NODE_TIMEOUT_MS
from controller.service import ControllerService, LoopStats
from events.state import Status
from projectors.metrics import ProjectorCollector, Snapshot
from runledger.metricsserver import MetricsServer
from tests.controller.test_metrics import CKPT, NOW, model_of, state
from tests.promtext import samples

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "runledger.json"
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
GRID_WIDTH = 24
PANEL_TYPES = {"row", "stat", "timeseries", "bargauge", "table"}
DATASOURCE_VAR = "datasource"

# PromQL's own words: the aggregation operators, the functions of the Prometheus
# 3 documentation ("Functions") and the keywords that are not series.
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_stddev", "histogram_stdvar", "histogram_sum", "hour", "idelta", "increase",
    "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute", "month",
    "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc",
    "sqrt", "time", "timestamp", "vector", "year", "avg_over_time", "min_over_time",
    "max_over_time", "sum_over_time", "count_over_time", "quantile_over_time",
    "stddev_over_time", "stdvar_over_time", "last_over_time", "present_over_time",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
            "or", "unless", "offset", "atan2", "inf", "nan"}
# Labels Prometheus itself attaches to every scraped series (the job and the target).
TARGET_LABELS = {"job", "instance"}

IDENT = re.compile(r"(?<![\w.$:])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
MATCHERS = re.compile(r"\{([^}]*)\}")
MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
RANGE = re.compile(r"\[[^\]]*\]")
OFFSET = re.compile(r"\boffset\s+-?\w+")
LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*(\w+)\s*\)")


@dataclass(frozen=True, slots=True)
class Expr:
    """What one PromQL expression names."""

    metrics: frozenset[str]
    functions: frozenset[str]
    labels: frozenset[str]  # in matchers and grouping clauses
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value)


def parse(expr: str) -> Expr:
    """The series, functions, labels and matchers of a PromQL expression, by its grammar's
    tokens: matchers ``{...}``, grouping ``by (...)``, ranges ``[...]`` and numbers are
    taken out first; an identifier followed by ``(`` is a function or an aggregation."""
    labels: set[str] = set()
    matchers: list[tuple[str, str, str]] = []

    def take_matchers(m: re.Match[str]) -> str:
        body, pos = m[1], 0
        while pos < len(body):
            one = MATCHER.match(body, pos)
            assert one, f"unreadable matcher {body[pos:]!r} in {expr!r}"
            labels.add(one[1])
            matchers.append((one[1], one[2], one[3]))
            pos = one.end()
        return " "

    def take_grouping(m: re.Match[str]) -> str:
        labels.update(w.strip() for w in m[2].split(",") if w.strip())
        return " "

    text = MATCHERS.sub(take_matchers, expr)
    text = GROUPING.sub(take_grouping, text)
    text = OFFSET.sub(" ", RANGE.sub(" ", text))
    metrics, functions = set(), set()
    for m in IDENT.finditer(text):
        word, call = m[1], m[2]
        if call:
            functions.add(word)
        elif word.lower() not in KEYWORDS:
            metrics.add(word)
    return Expr(frozenset(metrics), frozenset(functions), frozenset(labels), tuple(matchers))


def test_the_parser_finds_series_labels_and_functions() -> None:
    got = parse('histogram_quantile(0.99, sum by (le, run) (rate(x_seconds_bucket{run=~"$run",'
                ' a!="b\\"c"}[$__rate_interval] offset 5m))) > bool 1e3')
    assert got.metrics == {"x_seconds_bucket"}
    assert got.functions == {"histogram_quantile", "sum", "rate"}
    assert got.labels == {"le", "run", "a"}
    assert got.matchers == (("run", "=~", "$run"), ("a", "!=", 'b\\"c'))
    got = parse("sum(rate(a_total[5m])) without (x) / on (y) group_left (z) b == 1")
    assert got.metrics == {"a_total", "b"}
    assert got.labels == {"x", "y", "z"}
    assert parse("max(runledger_x)").metrics == {"runledger_x"}


# -- what runledger exports ----------------------------------------------------------


@dataclass
class _Service:
    """What ``ControllerCollector`` reads of a live ``ControllerService``."""

    model: Model | None
    stats: LoopStats
    # One partition, held and ready: this controller decides for every run.
    ownership: Ownership = field(
        default_factory=lambda: Ownership("ctl", 1, frozenset({0}), ready=frozenset({0})))


class _Agent(AgentCollector):
    """An agent's collector over a fixed snapshot: no agent, no workers."""

    def __init__(self, snap: AgentSnapshot) -> None:  # not the parent's: it needs an Agent
        self._snap = snap
        self.clock = lambda: NOW

    def snapshot(self) -> AgentSnapshot:
        return self._snap


class _Projector(ProjectorCollector):
    """The projector's collector over a fixed snapshot: no database, no broker."""

    def __init__(self, snap: Snapshot) -> None:  # not the parent's: it opens both
        self._snap = snap

    def snapshot(self) -> Snapshot:
        return self._snap


def _controller() -> ControllerCollector:
    live = state("run-a", Status.RUNNING, generation=2, step=57, tokens=57 * 1024,
                 checkpoint=CKPT, heartbeats={"r0": NOW - 1_500, "r1": NOW - 250},
                 failure_count=1, rejections=3, alerts=2,
                 open_alerts={"stall/r1": "e1", "loss_spike": "e2"})
    done = state("run-b", Status.FAILED, generation=1, step=9, failure_count=3)
    seen = NOW - 1_000
    nodes = Inventory({
        "n1": Node("n1", 4, "rack-1", seen, busy_slots=2),
        "n2": Node("n2", 2, "rack-1", seen, cordon="cordon", cordon_reason="disk"),
        "n3": Node("n3", 2, "rack-2", seen, cordon="drain", busy_slots=1),
        "n4": Node("n4", 2, "rack-2", seen, quarantined=True, quarantine_reason="xid"),
        "n5": Node("n5", 2, "rack-3", NOW - NODE_TIMEOUT_MS - 1)})
    model = replace(model_of({"run-a": live, "run-b": done}), inventory=nodes,
                    node_failures={"n4": 3})
    stats = LoopStats(inputs=5, facts=4, commands=2, ticks=9, last_tick_s=0.01)
    stats.report_to_fact.observe_all([0.004, 0.03, 0.2])
    service = _Service(model, stats)
    return ControllerCollector(cast(ControllerService, service), clock=lambda: NOW)


def _agent() -> AgentCollector:
    stats = AgentStats()
    stats.heartbeat(NOW - 800)
    stats.heartbeat_failed()
    return _Agent(AgentSnapshot(node="n1", slots=4, busy=2, workers=2, counted=stats.read(),
                                log_dropped=1 << 20))


def _projector() -> ProjectorCollector:
    return _Projector(Snapshot(
        applied=12, quarantined=1, batches=3, last_batch=5, last_batch_s=0.25,
        lag={("runledger.runs", 0): 0, ("runledger.reports", 4): 7},
        ettr={"run-a": 0.9}, snapshot_age_s=1.5, snapshot_s=0.1,
        suspicions={("run-a", "loss_spike"): 1}, verdicts={("run-a", "transient"): 1}))


# sample name -> label name -> the values exposed
Exported = dict[str, dict[str, set[str]]]


def _scrape(collector: ProjectorCollector | ControllerCollector | AgentCollector) -> str:
    server = MetricsServer(collector)  # loopback, an ephemeral port: as --metrics serves it
    try:
        with urllib.request.urlopen(server.url, timeout=10) as response:
            return str(response.read().decode())
    finally:
        server.close()


@pytest.fixture(scope="module")
def exported() -> Exported:
    out: Exported = {}
    for collector in (_controller(), _projector(), _agent()):
        text = _scrape(collector)
        empty = [f.name for f in text_string_to_metric_families(text) if not f.samples]
        # A family without a sample here would hide its labels from the checks below.
        assert not empty, f"give the fixture a state that exposes {empty}"
        for (name, labels), _ in samples(text).items():
            seen = out.setdefault(name, {})
            for key, value in labels:
                seen.setdefault(key, set()).add(value)
    return out


def prometheus_jobs() -> dict[str, list[str]]:
    config = yaml.safe_load(PROMETHEUS.read_text())
    return {job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
            for job in config["scrape_configs"]}


def with_prometheus_series(exported: Exported) -> Exported:
    """Plus ``up``, which Prometheus writes for every target of deploy/prometheus.yml."""
    jobs = prometheus_jobs()
    return {**exported, "up": {"job": set(jobs),
                               "instance": {t for ts in jobs.values() for t in ts}}}


def test_the_scrapes_hold_every_components_series(exported: Exported) -> None:
    # Counters are exposed with _total, histograms as _bucket, _sum and _count, and the
    # three collectors were read.
    assert "runledger_controller_inputs_total" in exported
    assert "runledger_controller_inputs" not in exported
    assert "runledger_projector_lag_records" in exported
    assert exported["runledger_run_heartbeat_age_seconds"]["member"] == {"r0", "r1"}
    assert exported["runledger_node_state"]["state"] == {
        "ready", "cordoned", "draining", "quarantined", "lost"}
    assert "+Inf" in exported["runledger_controller_report_to_fact_seconds_bucket"]["le"]
    assert "runledger_controller_report_to_fact_seconds" not in exported
    assert exported["runledger_agent_heartbeats_total"]["node"] == {"n1"}


# -- the dashboard ------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def all_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(where, PromQL, legend) of every target and of every query variable."""
    for panel in all_panels(board):
        for target in panel.get("targets", []):
            yield f"panel {panel.get('title')!r}", target.get("expr", ""), target.get(
                "legendFormat", "")
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = LABEL_VALUES.fullmatch(query.strip())
            assert m, f"variable {var['name']}: expected label_values(METRIC, LABEL): {query!r}"
            yield f"variable {var['name']!r}", m[1], "{{" + m[2] + "}}"


def series_problems(board: dict[str, Any], exported: Exported) -> list[str]:
    """Every name in the dashboard's queries that the scrapes do not expose."""
    known = with_prometheus_series(exported)
    problems = []
    for where, expr, legend in queries(board):
        if not expr.strip():
            problems.append(f"{where}: an empty query")
            continue
        got = parse(expr)
        if not got.metrics:
            problems.append(f"{where}: {expr!r} names no series")
        for name in sorted(got.metrics - set(known)):
            problems.append(f"{where}: {name} is not exported")
        for name in sorted(got.functions - FUNCTIONS - AGGREGATIONS):
            problems.append(f"{where}: {name}() is no PromQL function")
        labels = set(TARGET_LABELS) | {"__name__"}
        for name in got.metrics & set(known):
            labels |= set(known[name])
        if any(name.endswith("_bucket") for name in got.metrics):
            labels.add("le")
        used = got.labels | set(LEGEND.findall(legend))
        for label in sorted(used - labels):
            problems.append(f"{where}: no series of {expr!r} has a label {label!r}")
        for label, op, value in got.matchers:
            if "$" in value:
                continue  # a template variable: its values come from label_values
            values = {v for name in got.metrics & set(known)
                      for v in known[name].get(label, set())}
            # Each alternative of a plain pattern (and a plain value) must be exposed.
            alternatives = value.split("|") if op == "=~" and "(" not in value else [value]
            for alternative in alternatives:
                regex = op in ("=~", "!~")
                if not any(re.fullmatch(alternative, v) if regex else alternative == v
                           for v in values):
                    problems.append(f"{where}: {label}{op}{alternative!r} matches none of "
                                    f"{sorted(values)}")
    return problems


def structure_problems(board: dict[str, Any]) -> list[str]:
    """What Grafana needs of the file, and what keeps it readable."""
    problems = []
    for key in ("uid", "title"):
        if not isinstance(board.get(key), str) or not board[key]:
            problems.append(f"no {key}")
    if not isinstance(board.get("schemaVersion"), int):
        problems.append("no integer schemaVersion")
    variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
    source = variables.get(DATASOURCE_VAR, {})
    if source.get("type") != "datasource" or source.get("query") != "prometheus":
        problems.append(f"no ${DATASOURCE_VAR} variable of type datasource over prometheus")
    reference = {"type": "prometheus", "uid": "${" + DATASOURCE_VAR + "}"}
    for name, var in variables.items():
        if var.get("type") == "query" and var.get("datasource") != reference:
            problems.append(f"variable {name!r} does not read ${DATASOURCE_VAR}")
    ids: dict[int, str] = {}
    boxes: list[tuple[str, int, int, int, int]] = []
    for panel in all_panels(board):
        title = panel.get("title")
        if not isinstance(title, str) or not title.strip():
            problems.append(f"panel {panel.get('id')}: no title")
        pid = panel.get("id")
        if not isinstance(pid, int):
            problems.append(f"panel {title!r}: no integer id")
        elif pid in ids:
            problems.append(f"panel {title!r}: id {pid} is also {ids[pid]!r}'s")
        else:
            ids[pid] = str(title)
        if panel.get("type") not in PANEL_TYPES:
            problems.append(f"panel {title!r}: type {panel.get('type')!r}")
        grid = panel.get("gridPos", {})
        x, y, w, h = (grid.get(k) for k in ("x", "y", "w", "h"))
        if not all(isinstance(n, int) for n in (x, y, w, h)):
            problems.append(f"panel {title!r}: no gridPos")
        else:
            if x < 0 or w < 1 or h < 1 or x + w > GRID_WIDTH:
                problems.append(f"panel {title!r}: gridPos {grid} is off the grid")
            boxes.append((str(title), x, y, w, h))
        if panel.get("type") == "row":
            if panel.get("targets"):
                problems.append(f"row {title!r} has queries")
            continue
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"panel {title!r}: no target")
        if panel.get("datasource") != reference:
            problems.append(f"panel {title!r}: datasource {panel.get('datasource')}")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or not all(refs):
            problems.append(f"panel {title!r}: refIds {refs}")
        for target in targets:
            if target.get("datasource") != reference:
                problems.append(f"panel {title!r}, target {target.get('refId')}: datasource "
                                f"{target.get('datasource')}")
    for i, (a, ax, ay, aw, ah) in enumerate(boxes):
        for b, bx, by, bw, bh in boxes[i + 1:]:
            if ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah:
                problems.append(f"panels {a!r} and {b!r} overlap")
    return problems


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    problems = structure_problems(board)
    assert not problems, "\n".join(problems)
    assert len(list(all_panels(board))) > 10


def test_every_series_the_dashboard_names_is_exported(exported: Exported) -> None:
    board = dashboard()
    problems = series_problems(board, exported)
    assert not problems, "\n".join(problems)
    named = {m for _, expr, _ in queries(board) for m in parse(expr).metrics}
    # What the issue asks for: runs by state, report-to-fact latency, projector lag,
    # heartbeats, alerts, node states, and the agents' own series.
    assert {"runledger_controller_runs", "runledger_projector_lag_records",
            "runledger_run_heartbeat_age_seconds", "runledger_run_open_alerts",
            "runledger_controller_report_to_fact_seconds_bucket",
            "runledger_controller_nodes", "runledger_node_state",
            "runledger_node_heartbeat_age_seconds", "runledger_agent_heartbeats_total",
            "runledger_agent_heartbeat_age_seconds", "runledger_agent_slots",
            "runledger_agent_workers_running", "runledger_agent_worker_exits_total",
            "runledger_agent_log_dropped_bytes_total"} <= named


def _set_expr(board: dict[str, Any], title: str, expr: str) -> dict[str, Any]:
    board = copy.deepcopy(board)
    (panel,) = [p for p in all_panels(board) if p.get("title") == title]
    panel["targets"][0]["expr"] = expr
    return board


@pytest.mark.parametrize(("expr", "why"), [
    ("sum(runledger_run_open_alert)", "runledger_run_open_alert is not exported"),
    ("sum(rate(runledger_controller_inputs[5m]))", "runledger_controller_inputs is not"),
    ("sum by (topik) (runledger_projector_lag_records)", "has a label 'topik'"),
    ('sum(runledger_controller_runs{status="Faild"})', "status='Faild' matches none"),
    ('up{job="runledger-worker"}', "job='runledger-worker' matches none"),
    ("sum(rate(runledger_agent_heartbeat_total[5m]))", "runledger_agent_heartbeat_total is"),
    ("histogram_quantile(0.99, sum by (le) (rate(runledger_controller_report_to_fact_second"
     "s[5m])))", "runledger_controller_report_to_fact_seconds is not"),
    ('sum(runledger_controller_nodes{state="Lost"})', "state='Lost' matches none"),
    ("sum by (node, outcome) (runledger_agent_worker_exits)",
     "runledger_agent_worker_exits is not"),
    ("max by (nod) (runledger_agent_heartbeat_age_seconds)", "has a label 'nod'"),
    ("sum(rat(runledger_run_tokens_total[5m]))", "rat() is no PromQL function"),
])
def test_a_misnamed_series_label_or_function_is_caught(exported: Exported, expr: str,
                                                      why: str) -> None:
    board = _set_expr(dashboard(), "Open alerts", expr)
    problems = series_problems(board, exported)
    assert any(why in p for p in problems), problems


def test_a_broken_panel_is_caught() -> None:
    board = dashboard()
    panels = [p for p in all_panels(board) if p["type"] != "row"]
    broken = copy.deepcopy(board)
    first, second = [p for p in all_panels(broken) if p["type"] != "row"][:2]
    second["id"] = first["id"]
    first["targets"][0]["datasource"] = {"type": "prometheus", "uid": "DS_PROMETHEUS"}
    second["title"] = ""
    problems = structure_problems(broken)
    assert any("id" in p and "also" in p for p in problems), problems
    assert any("datasource" in p for p in problems), problems
    assert any("no title" in p for p in problems), problems
    moved = copy.deepcopy(board)
    next(p for p in all_panels(moved) if p["id"] == panels[1]["id"])["gridPos"] = dict(
        panels[0]["gridPos"])
    assert any("overlap" in p for p in structure_problems(moved))

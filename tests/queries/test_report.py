"""queries/report.py, with report_sections, report_html and report_svg: the HTML
postmortem, read as markup and as a browser renders it.

The projection is a hand-timed log (tests/queries/timeline.py), so every number
on the page is known. The browser half runs Debian's headless Chromium
(/usr/bin/chromium or $CHROMIUM); without it these tests fail and say how to
install it (`scripts/chromium.sh`), since a report nobody rendered is untested.
The command, ``runledger report``, is tests/runledger/commands/test_report.py.
"""

from __future__ import annotations

import os
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from queries.errors import QueryError
from queries.report import report
from queries.report import text as report_text
from tests.queries.timeline import Timeline, crash_and_recover, project

# The parts the crash-and-recover log has (no elastic resize: the resize_* parts are 0).
PARTS = ("productive", "checkpoint", "lost_work", "detection", "recovery", "input_stall",
         "idle", "other")
RESIZE_PARTS = ("resize_stop", "resize_rendezvous", "resize_restore")
_VOID = {"meta", "br", "img", "input", "link", "hr", "wbr", "source", "col", "area", "base"}


class SlowR1(Timeline):
    """crash_and_recover's log with rank r1 reporting 1.9x r0's step time (a straggler);
    the controller's StepCommitted times, and so the ETTR parts, are unchanged."""

    def step(self, gen: int, step: int, ms: int = 100, wait: int = 10,
             loss: float | None = None,
             rank_ms: tuple[float, float] | None = None) -> None:
        super().step(gen, step, ms, wait, loss, rank_ms or (float(ms), 1.9 * ms))


# -- a minimal DOM over html.parser ------------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self) -> list[Node]:
        out = [self]
        for c in self.children:
            if isinstance(c, Node):
                out.extend(c.walk())
        return out

    def find(self, tag: str | None = None, **attrs: str) -> list[Node]:
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [n for n in self.walk() if (tag is None or n.tag == tag)
                and all(n.attrs.get(k) == v for k, v in want.items())]

    def by_id(self, ident: str) -> Node:
        (node,) = self.find(id=ident)
        return node

    def cell(self, col: str) -> str:
        (td,) = self.find("td", data_col=col)
        return td.text().strip()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    b = _Builder()
    b.feed(page)
    b.close()
    return b.root


def seconds(text: str) -> float:
    return float(text.replace(",", "").removesuffix(" s").lstrip("+"))


# -- fixtures ----------------------------------------------------------------------------


def _alert(tl: Timeline, detail: str) -> None:
    at = tl.events[-1].header.occurred_at  # raised as the run ended, resolved never
    tl.add(tl.ev.alert(2, at=at, alert="straggler", owner="training-oncall",
                       runbook="runbooks/straggler.md", detail=detail, subject="r1",
                       threshold="p50 > 1.5x others", value=1.9))


@pytest.fixture(scope="module")
def projection(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("report") / "p.duckdb"
    tl = SlowR1()
    expected = crash_and_recover(tl)
    _alert(tl, "r1 <script>alert('x')</script> & slow")
    con = duckdb.connect(str(path))
    project(con, tl)
    con.close()
    return path, expected


@pytest.fixture(scope="module")
def page(projection: tuple[Path, dict[str, int]]) -> str:
    con = duckdb.connect(str(projection[0]), read_only=True)
    try:
        return report(con, "run-a")
    finally:
        con.close()


@pytest.fixture(scope="module")
def written(page: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "run-a.html"
    out.write_text(page, encoding="utf-8")
    return out


# -- the markup --------------------------------------------------------------------------


def test_ettr_table_parts_sum_to_the_allocation(page: str,
                                                projection: tuple[Path, dict[str, int]]) -> None:
    doc = parse(page)
    ettr = doc.by_id("ettr-table")
    got = {p: seconds(ettr.find("tr", data_part=p)[0].cell("seconds")) for p in PARTS}
    allocated = seconds(ettr.find("tr", data_part="allocated")[0].cell("seconds"))
    expected = projection[1]
    assert got == {p: pytest.approx(ms / 1000) for p, ms in expected.items()}
    assert sum(got.values()) == pytest.approx(allocated) == pytest.approx(5.3)
    assert doc.by_id("ettr-ratio").text() == "0.509"
    assert {r.attrs["data-part"] for r in doc.by_id("ettr-bar").find("rect")} == set(PARTS)
    for p in RESIZE_PARTS:  # listed, and empty
        assert seconds(ettr.find("tr", data_part=p)[0].cell("seconds")) == 0


def test_incident_row_has_detection_rto_and_rpo(page: str) -> None:
    (row,) = parse(page).by_id("incidents-table").find("tr", data_generation="1")
    assert row.cell("failure_class") == "worker_crash" and row.cell("member") == "r1"
    assert seconds(row.cell("detection_s")) == pytest.approx(0.030)
    assert seconds(row.cell("rto_s")) == pytest.approx(0.530)
    assert row.cell("rpo_steps") == "5" and row.cell("steps") == "25 → 20"
    assert seconds(row.cell("rpo_s")) == pytest.approx(0.570)
    assert row.cell("fault_at") == "+3.620 s"  # seconds since admission, as on the timeline
    assert row.cell("log_path") == "/agent/run/g1/r1.log"
    assert "Segmentation fault" in row.cell("stderr_tail")


def test_the_slow_rank_is_flagged(page: str) -> None:
    table = parse(page).by_id("stragglers-table")
    (r1,) = table.find("tr", data_member="r1")
    (r0,) = table.find("tr", data_member="r0")
    assert "flagged" in r1.attrs.get("class", "") and "straggler" in r1.text()
    assert "flagged" not in r0.attrs.get("class", "")
    assert (r1.cell("p50_ms"), r0.cell("p50_ms")) == ("190.0", "100.0")


def test_timeline_header_mixture_provenance_and_audit(page: str) -> None:
    doc = parse(page)
    svg = doc.by_id("timeline-svg")
    assert [b.attrs["data-generation"] for b in svg.find("rect", **{"class": "band"})] == ["1", "2"]
    assert [c.attrs["data-step"] for c in svg.find("path", **{"class": "checkpoint"})] == [
        "10", "20", "30"]
    assert len(svg.find("g", **{"class": "failure"})) == 1
    assert len(svg.find("g", **{"class": "recovery"})) == 1
    assert svg.find("polyline", **{"class": "steps lost"})[0].attrs["data-generation"] == "1"
    assert "seconds since admission" in svg.text()
    summary = doc.by_id("summary").text()
    for fact in ("succeeded", "3f1c2a9b7d4e5f60718293a4b5c6d7e8f9012345", "sha256:d",
                 "5.300 s"):
        assert fact in summary
    (web,) = doc.by_id("mixture-table").find("tr", data_source="web")
    assert (web.cell("count"), web.cell("target"), web.cell("drift")) == ("150", "62.5%", "0.0")
    chain = doc.by_id("provenance-table").find("tr")[1:]
    assert [r.attrs["data-step"] for r in chain] == ["30", "20", "10"]
    assert doc.by_id("goodput").text().count("120,000") == 1
    audit = doc.by_id("audit")
    assert audit.find("details") and "GenerationStarted" in audit.text()


def test_log_strings_are_escaped_and_nothing_is_fetched(page: str) -> None:
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)" in page
    (alert,) = parse(page).by_id("alerts-table").find("tr", data_alert="straggler")
    assert alert.cell("detail") == "r1 <script>alert('x')</script> & slow"
    for marker in ("src=", "href=", "<link", "url(", "@import", "http:", "https:"):
        assert marker not in page, marker


def test_the_page_is_a_pure_function_of_the_projection(
        page: str, projection: tuple[Path, dict[str, int]]) -> None:
    con = duckdb.connect(str(projection[0]), read_only=True)
    try:
        assert report(con, "run-a") == page
        cut = parse(report(con, "run-a", max_audit_rows=10)).by_id("audit-table")
    finally:
        con.close()
    rows = cut.find("tr")[1:]
    assert len(rows) == 11 and "facts omitted" in rows[5].text()


def test_empty_sections_say_so() -> None:
    con = duckdb.connect()
    tl = Timeline(run_id="run-q")
    tl.submit()  # queued: never admitted, nothing ran
    project(con, tl)
    doc = parse(report(con, "run-q"))
    said = {sid: doc.by_id(sid).text() for sid in (
        "timeline", "ettr", "incidents", "goodput", "mixture", "stragglers", "alerts",
        "provenance", "audit", "recovery")}
    assert "no generation started yet" in said["timeline"]
    assert "no allocated time yet" in said["ettr"]
    assert "no failures" in said["incidents"] and "no alerts" in said["alerts"]
    assert "no committed checkpoint" in said["provenance"]
    assert "no progress or checkpoints yet" in said["recovery"]
    assert "no per-rank step times reported" in said["stragglers"]
    assert "live" in doc.by_id("status").text()
    with pytest.raises(QueryError, match=r"unknown run 'run-x'; .*run-q"):
        report(con, "run-x")


# -- in a browser ------------------------------------------------------------------------


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        pytest.fail(f"headless Chromium not found at {path} ($CHROMIUM names another):"
                    " the report's browser test needs it. Install Debian's package with"
                    " `scripts/chromium.sh` (as root: apt-get install -y chromium).")
    return path


def browse(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp / 'profile'}", *extra, page.as_uri()]
    env = {**os.environ, "HOME": str(tmp)}  # keep Chromium's caches out of the real home
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def test_chromium_renders_what_a_person_reads(written: Path, tmp_path: Path) -> None:
    dom = parse(browse(written, tmp_path, "--dump-dom").stdout)
    assert "run-a" in dom.by_id("run-id").text()
    assert "ETTR 0.509" in dom.by_id("ettr").find("h2")[0].text()
    rendered = {r.attrs["data-part"] for r in dom.by_id("ettr-table").find("tr")
                if "data-part" in r.attrs}
    assert rendered == {*PARTS, *RESIZE_PARTS, "allocated"}
    incidents = dom.by_id("incidents").text()
    assert "worker_crash" in incidents and "0.530" in incidents
    assert "no suspicions" in dom.by_id("sdc").text()
    assert dom.by_id("sdc-coverage").find("tr", data_detector="nonfinite")
    assert dom.by_id("timeline-svg").find("polyline")


def test_chromium_screenshot_is_a_real_picture(written: Path, tmp_path: Path) -> None:
    shot = tmp_path / "r.png"
    browse(written, tmp_path, f"--screenshot={shot}", "--window-size=1280,2400")
    data = shot.read_bytes()
    assert len(data) > 50_000, f"screenshot only {len(data)} bytes"
    width, height, rows = png_rows(data, 300)
    assert (width, height) == (1280, 2400)
    # The header band is the page's dark navy (#102a43): the style sheet applied.
    r, g, b = rows[10][8]
    assert abs(r - 0x10) < 8 and abs(g - 0x2A) < 8 and abs(b - 0x43) < 8, (r, g, b)
    colours = {px for row in rows for px in row}
    assert len(colours) > 30, f"only {len(colours)} colours in the top 300 rows"


def png_rows(data: bytes, count: int) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """Width, height and the first ``count`` rows of RGB pixels of an 8-bit PNG (stdlib
    only: no imaging library is a dependency of this project)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + size]
        header = body if kind == b"IHDR" else header
        if kind == b"IDAT":
            chunks.append(body)
        pos += 12 + size
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    stride = width * bpp + 1
    raw = zlib.decompressobj().decompress(b"".join(chunks), stride * count)
    prev, rows = bytearray(width * bpp), []
    for r in range(count):
        kind, cur = raw[r * stride], bytearray(raw[r * stride + 1:(r + 1) * stride])
        for i in range(len(cur)):
            a = cur[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                cur[i] = (cur[i] + a) & 255
            elif kind == 2:
                cur[i] = (cur[i] + b) & 255
            elif kind == 3:
                cur[i] = (cur[i] + ((a + b) >> 1)) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(cur[i:i + 3]) for i in range(0, len(cur), bpp)])
        prev = cur
    return width, height, rows


def failed_run() -> Timeline:
    """Admitted, a few steps, then r1's crash escalated: the run ends failed."""
    tl = Timeline(run_id="run-f")
    tl.submit()
    tl.admit()
    tl.start(1)
    tl.confirm(1)
    for step in range(1, 4):
        tl.step(1, step)
    tl.exit(1)
    tl.fail(1, action="escalate")
    tl.finish(1, outcome="failed")
    return tl


def test_a_failed_run_opens_with_what_failed_where_and_its_last_lines() -> None:
    """#34: the traceback sat in the incidents table's last column, behind a scroll."""
    con = duckdb.connect()
    project(con, failed_run())
    html = report(con, "run-f")
    doc = parse(html)
    sections = [n.attrs.get("id") for n in doc.find("section")]
    assert sections[0] == "why", sections  # before the summary and everything else
    why = doc.by_id("why").text()
    assert "crash:r1:signal 9" in why and "escalate" in why and "r1" in why
    assert "Fatal Python error: Segmentation fault" in doc.by_id("why-output").text()
    assert doc.by_id("why-log").text() == "/agent/run/g1/r1.log"
    assert "runledger logs run-f --tail 100" in why
    assert "white-space:pre-wrap" in html  # wrapped, never behind a horizontal scroll
    text = report_text(con, "run-f")
    assert text.splitlines()[1] == ("Why it failed: worker_crash crash:r1:signal 9 -> escalate, "
                                    "r1 on node node-a, generation 1")


def test_a_run_that_did_not_fail_has_no_why(page: str) -> None:
    assert not parse(page).find("section", id="why")


def test_an_own_loader_runs_provenance_says_what_is_not_recorded() -> None:
    """#34: the README's own job showed `positions [0, None)` and a bare dataset None."""
    from tests.queries.lineage_check import own_loader

    tl = Timeline(run_id="run-o")
    crash_and_recover(tl)
    own_loader(tl)
    con = duckdb.connect()
    project(con, tl)
    doc = parse(report(con, "run-o"))
    facts = doc.by_id("provenance-facts").text()
    assert "sha256:d (as submitted: the job loads its own data)" in facts
    assert "not recorded: the job's own loader reports no positions; 3 segment(s)" in facts
    assert "not recorded: the job's own loader reports no per-source counts" in facts
    chain = doc.by_id("provenance-table").find("tr")[1:]
    assert [r.cell("positions") for r in chain] == ["not recorded"] * 3
    assert "None" not in doc.by_id("provenance").text()

"""The live view (``runledger ui``) as a person watches it: headless Chromium, driven
by Playwright, follows the demo's run from its row in the runs table through
training, the injected kill, the recovery and the success, on one page that is
never reloaded.

One ``runledger demo`` subprocess (its own broker in its work directory, as in
tests/e2e/test_demo.py) with a free ``--ui-port``, a little slower than the demo
test's (``--step-sleep 0.6``) so that a page polling every 2 s on a loaded 2-core
machine sees the step move. The browser is Debian's Chromium (``/usr/bin/chromium``,
``$CHROMIUM`` names another; Playwright's own browser download is never used).
What is checked is what a user must see: the step growing without a reload, the
failure with its class, signature and action, generation 2 taking over, the
success, the report's curves and timeline, a live ETTR bar whose parts fill it,
the worker's output behind the failure's link, the demo's node with a link to
the run, no sideways scroll at 1366 and 800 px, and, once the demo has stopped
the server, a page that says it is no longer live. What is wrong but not fatal
(the bar, the node's cell, the layout) is collected and reported at the end,
after every screenshot is taken.
Screenshots go to ``$RUNLEDGER_TEST_ARTIFACTS/ui/`` (default ``test-artifacts/ui/``
in the checkout, ignored by git). Every process is stopped on every way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runledger.stack import Stack
from tests.e2e.harness import demo_processes

try:
    from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright
except ImportError:  # the dev extras not installed yet: the test says how, below
    sync_playwright = None  # type: ignore[assignment]

STEPS, INTERVAL, KILL, STEP_SLEEP = 30, 5, 12, 0.6
WAIT_MS = 240_000  # each stage of the run, on a shared 2-core machine
UNREACHABLE_MS = 10_000  # a stopped server shows on the open page within this
CHROMIUM = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage",
                 # Two tabs poll at once: neither may be throttled as a background tab.
                 "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                 "--disable-backgrounding-occluded-windows"]
LAPTOP: ViewportSize = {"width": 1366, "height": 900}
NARROW: ViewportSize = {"width": 800, "height": 1000}
ARTIFACTS = Path(os.environ.get("RUNLEDGER_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts") / "ui"

# Where the page is wider than the window: the elements sticking out on the right.
_SIDEWAYS = """() => {
  const d = document.documentElement;
  const out = [...document.querySelectorAll('body *')]
    .filter((e) => e.getBoundingClientRect().right > d.clientWidth + 1)
    .slice(0, 8)
    .map((e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}` +
                `${e.className && typeof e.className === 'string' ? '.' + e.className : ''}` +
                ` right=${Math.round(e.getBoundingClientRect().right)}`);
  return {scroll: d.scrollWidth, client: d.clientWidth, wide: out};
}"""


@dataclass
class Demo:
    """The demo subprocess: its work directory, output files and what it printed."""

    work: Path
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    started: float = field(default_factory=time.monotonic)

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def wait_for_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` in the demo's progress lines (its stderr)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = re.search(pattern, self.stderr())
            if found:
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"the demo exited ({self.proc.returncode}) before printing "
                            f"{pattern!r}:\n{self.stderr()[-4000:]}")
            time.sleep(0.2)
        pytest.fail(f"the demo printed no {pattern!r} in {timeout_s:.0f} s:\n"
                    f"{self.stderr()[-4000:]}")

    def summary(self, timeout_s: float) -> dict[str, Any]:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the demo did not end within {timeout_s:.0f} s after the run"
                        f" succeeded:\n{self.stderr()[-4000:]}")
        text = self.out.read_text(encoding="utf-8")
        assert text.strip(), self.stderr()[-4000:]
        doc: dict[str, Any] = json.loads(text)
        return doc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(demo: Demo) -> None:
    """SIGTERM: the demo stops everything it started (as on Ctrl-C); whatever is left
    after 90 s is killed: the demo's process group, its services by pid, its broker."""
    if demo.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            demo.proc.send_signal(signal.SIGTERM)
        try:
            demo.proc.wait(90)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(demo.proc.pid, signal.SIGKILL)  # its own session: pgid == pid
            demo.proc.wait(30)
    for pid in demo_processes(demo.work):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if (demo.work / "stack").is_dir():
        Stack(demo.work / "stack").down(purge=True)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    work = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if k != "RUNLEDGER_BOOTSTRAP"}
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [sys.executable, "-m", "runledger.cli", "demo", "--work-dir", str(work), "--json",
           "--steps", str(STEPS), "--interval", str(INTERVAL), "--kill-step", str(KILL),
           "--step-sleep", str(STEP_SLEEP), "--ui-port", str(free_port()), "--timeout", "600"]
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(cmd, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    running = Demo(work, proc, out, err)
    try:
        yield running
    finally:
        _stop(running)
        # What the demo printed, for a failure's report (pytest shows captured output).
        print(running.stderr()[-6000:])


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    if sync_playwright is None:
        pytest.fail("Playwright for Python is not installed: `.venv/bin/pip install -e"
                    " '.[dev]'` (it drives the system Chromium; no `playwright install`)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"headless Chromium not found at {CHROMIUM} ($CHROMIUM names another):"
                    " install Debian's package with `scripts/chromium.sh`")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=120_000)
        try:
            yield b
        finally:
            b.close()


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sideways(page: Page, width: int) -> list[str]:
    """Nothing when the page is no wider than its window; else what sticks out."""
    seen: dict[str, Any] = page.evaluate(_SIDEWAYS)
    if seen["scroll"] <= seen["client"] + 1:
        return []
    return [f"at {width} px the page scrolls sideways ({seen['scroll']} > {seen['client']}):"
            f" {seen['wide']}"]


def from_projection(page: Page, selector: str, timeout_ms: int = 120_000) -> None:
    """Wait for a part the page draws from the projector's snapshot; when it never comes,
    say how old the page's projection is and what it shows instead."""
    try:
        page.wait_for_selector(selector, timeout=timeout_ms)
    except Exception:
        shown = page.inner_text("#projection-sections")[:300]
        pytest.fail(f"{selector} did not appear in {timeout_ms / 1000:.0f} s after the run"
                    f" ended. The header says {page.inner_text('#data-age')!r}; the banner"
                    f" {page.inner_text('#banner')!r}; the sections {shown!r}")


def ettr_bar(page: Page) -> list[str]:
    """The live ETTR bar's parts sum to the allocated time (queries/ettr.py), so they fill
    it: a part the page does not know is time missing from the picture."""
    filled: dict[str, Any] = page.evaluate("""() => {
      const bar = document.querySelector('#ettr-bar');
      const parts = [...bar.children];
      return {share: parts.reduce((s, e) => s + e.getBoundingClientRect().width, 0) /
                     bar.getBoundingClientRect().width,
              parts: parts.map((e) => e.title)};
    }""")
    if filled["share"] >= 0.98:
        return []
    return [f"the live ETTR bar fills {100 * filled['share']:.0f}% of its width, not all of"
            f" it: parts drawn {filled['parts']}; the run's ETTR (the report's #ettr) has"
            " parts the page leaves out"]


def runs_on_node(page: Page, run_id: str) -> list[str]:
    """The nodes table's "runs on it": a link per live run, nothing else."""
    cell = page.locator('tr[data-node="demo-node"] td[data-col="runs"]')
    text = cell.inner_text().strip()
    if text == "-":  # between generations no member is placed: nothing to show
        return []
    if cell.locator(f'a[href="/runs/{run_id}"]').count() != 1 or text != "demo":
        return [f"the nodes page's 'runs on it' cell for demo-node reads {text!r}, not one"
                f" link to /runs/{run_id} named after the run"]
    return []


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_person_watches_the_run_train_fail_recover_and_succeed_live(
        demo: Demo, browser: Browser) -> None:
    base = demo.wait_for_line(r"live view: (https?://\S+)", 240)[1]
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(60_000)
    page = context.new_page()
    errors: list[str] = []  # uncaught exceptions and console errors while the server is up
    problems: list[str] = []  # wrong but not fatal: reported together at the end
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error"
            else None)

    # -- the runs table: the demo's run appears in it -----------------------------------
    page.goto(f"{base}/")
    row = page.wait_for_selector('table#runs tr[data-run^="demo-"]', timeout=WAIT_MS)
    assert row is not None
    run_id = row.get_attribute("data-run") or ""
    printed = demo.wait_for_line(r"watch it live: (\S+)/runs/(\S+)", 60)
    assert (printed[1], printed[2]) == (base, run_id)
    assert page.locator(f'tr[data-run="{run_id}"] td[data-col="step"]').count() == 1
    assert "1 of 1 shown" in page.inner_text("#run-counts")
    shot(page, "01-runs")

    # -- its page, from the row's link; never reloaded from here on ------------------------
    page.click(f'tr[data-run="{run_id}"] td[data-col="run_id"] a')
    page.wait_for_url(f"{base}/runs/{run_id}")
    page.wait_for_selector("#run-step[data-step]", timeout=WAIT_MS)
    page.evaluate("window.__marker = 1")
    first = int(page.get_attribute("#run-step", "data-step") or 0)
    page.wait_for_function(
        "(s) => Number(document.querySelector('#run-step')?.dataset.step) > s",
        arg=first, timeout=WAIT_MS)
    assert page.locator("#members-table tr[data-member]").count() == 2
    shot(page, "02-run-training")

    # -- the kill: a classified failure, with its output behind a link --------------------
    failure = '#failures ul.failures li.failure[data-generation="1"]'
    page.wait_for_function(
        "(sel) => [...document.querySelectorAll(sel)]"
        ".some((li) => li.textContent.includes('worker_crash'))",
        arg=failure, timeout=WAIT_MS)
    what = page.inner_text(f"{failure} .what")
    assert "worker_crash" in what and "signal=9" in what and "restart" in what, what
    shot(page, "03-run-failure")
    log_link = page.locator(f"{failure} a", has_text="worker output")
    href = log_link.get_attribute("href")
    assert href == f"/runs/{run_id}/logs?generation=1&rank=r1", href

    # In a second tab, so that the run's page keeps running: the output, the nodes.
    other = context.new_page()
    other.on("pageerror", lambda exc: errors.append(f"pageerror (2nd tab): {exc}"))
    other.goto(f"{base}{href}")
    try:
        other.wait_for_selector('pre#log[data-state="exited"]', timeout=120_000)
    except Exception:
        pytest.fail(f"the killed worker's output page never said it exited: "
                    f"{other.inner_text('#log-head')!r}")
    head = other.inner_text("#log-head")
    assert "exited" in head and "generation 1" in head and "/" in head, head
    shot(other, "05-logs")
    other.goto(f"{base}/nodes")
    node = other.wait_for_selector('table#nodes tr[data-node="demo-node"]', timeout=WAIT_MS)
    assert node is not None and node.get_attribute("data-state") == "ready"
    problems += runs_on_node(other, run_id)
    shot(other, "06-nodes")
    other.close()

    # -- the recovery and the success, on the same page ------------------------------------
    page.bring_to_front()
    page.wait_for_function(
        "() => Number(document.querySelector('#run-generation')?.textContent) >= 2 &&"
        " ['Running', 'Succeeded'].includes("
        "document.querySelector('#run-state')?.dataset.state)", timeout=WAIT_MS)
    shot(page, "04a-run-recovered")
    page.wait_for_selector('#run-state[data-state="Succeeded"]', timeout=WAIT_MS)
    assert page.inner_text("#run-generation") == "2"
    assert int(page.get_attribute("#run-step", "data-step") or 0) == STEPS
    # The curves and the timeline are drawn right under the status; the rest below.
    for part in ("#charts #curves svg", "#charts #timeline", "#projection-sections #ettr",
                 "#ettr-bar"):
        from_projection(page, part)
    assert page.evaluate("window.__marker") == 1, "the run's page was reloaded"
    shot(page, "04b-run-succeeded")

    problems += ettr_bar(page)
    problems += sideways(page, LAPTOP["width"])
    page.set_viewport_size(NARROW)
    page.wait_for_timeout(500)  # one layout pass
    problems += sideways(page, NARROW["width"])
    shot(page, "07-run-narrow")
    page.set_viewport_size(LAPTOP)
    up_errors = list(errors)

    # -- the demo ends and stops the server: the open page says so -------------------------
    summary = demo.summary(300)
    assert summary["ok"] is True, summary["error"]
    assert summary["ui_url"] == base and summary["run_id"] == run_id
    page.wait_for_function(
        "() => document.body.dataset.health === 'unreachable' &&"
        " !document.getElementById('banner').hidden", timeout=UNREACHABLE_MS)
    assert "not answering" in page.inner_text("#banner")
    assert page.get_attribute("#run-state", "data-state") == "Succeeded"  # what it last saw
    assert page.evaluate("window.__marker") == 1, "the run's page was reloaded"
    shot(page, "08-run-unreachable")
    context.close()

    assert not problems, "\n".join(problems)
    assert not [e for e in up_errors if "pageerror" in e or "Content Security Policy" in e], \
        up_errors

"""``runledger query`` and ``report`` while ``runledger project`` runs (its snapshot), and
after it stopped (the live file), each saying how far behind the log it is; the
projector's ``/metrics`` meanwhile, with the snapshot's age."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from projectors.snapshot import snapshot_path
from tests.projectors.test_projector import publish
from tests.promtext import scrape, until

pytestmark = pytest.mark.kafka


def cli(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args],
                          env={**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap},
                          capture_output=True, text=True, timeout=300)


def snapshot_steps(db: Path, run_id: str) -> int | None:
    """The run's steps in the published snapshot, or None while there is none."""
    snap = snapshot_path(db)
    if not snap.exists():
        return None
    con = duckdb.connect(str(snap), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def test_query_and_report_answer_while_the_projector_runs_and_state_the_lag(
        bootstrap: str, tmp_path: Path, run_id: str) -> None:
    publish(bootstrap, run_id, 12)
    db, err = tmp_path / "projection.duckdb", tmp_path / "project.err"
    with err.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runledger.cli", "project", "--db", str(db),
             "--snapshot-every", "0", "--metrics", "127.0.0.1:0"],
            env={**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap}, stdout=subprocess.DEVNULL,
            stderr=sink, start_new_session=True)
    try:
        url = until(lambda: (m.group(1) if (m := re.search(
            r"^metrics at (http://\S+/metrics)$", err.read_text(), re.M)) else None),
            60, "the metrics line")
        until(lambda: snapshot_steps(db, run_id) == 12 or None, 120, "the run in the snapshot")

        ettr = cli("query", "ettr", run_id, "--db", str(db), bootstrap=bootstrap)
        assert ettr.returncode == 0, ettr.stderr
        # This run was never admitted: no allocated time, but the run is in the projection.
        assert ettr.stdout.endswith("ETTR: no allocated time yet\n")
        assert "projection:" not in ettr.stdout
        lag = ettr.stderr.strip()  # one short line: which file, how old, how far behind
        where = re.escape(str(snapshot_path(db)))
        assert re.fullmatch(r"projection: snapshot, [\d.]+ (s|min|h) old, (caught up|lag unknown|"
                            rf"[\d,]+ records behind) \({where}\)", lag), lag

        doc = json.loads(cli("query", "ettr", run_id, "--db", str(db), "--json",
                             bootstrap=bootstrap).stdout)
        assert doc["projection"]["source"] == "snapshot"
        assert doc["projection"]["projector_running"] is True
        assert set(doc["projection"]["behind"]) == {"runledger.runs", "runledger.reports"}
        assert doc["query"] == "ettr" and doc["run_id"] == run_id and doc["rows"] == []

        html = tmp_path / "r.html"
        page = cli("report", run_id, "--db", str(db), "--html", str(html), bootstrap=bootstrap)
        assert page.returncode == 0, page.stderr
        header = re.search(r'<p class="lag" id="projection-lag">([^<]*)</p>', html.read_text())
        assert header and header.group(1).startswith("projection: snapshot ")
        assert "projection: snapshot " in page.stderr  # the long form, as in the page

        metrics = scrape(url)
        assert metrics[("runledger_projector_snapshot_age_seconds", ())] >= 0
        assert ("runledger_projector_snapshot_seconds", ()) in metrics
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, err.read_text()

    # Stopped: the live file is free again and read, and the final snapshot (which holds
    # all of it) still says how far behind the log it was.
    after = cli("query", "ettr", run_id, "--db", str(db), bootstrap=bootstrap)
    assert after.returncode == 0, after.stderr
    assert after.stderr.startswith("projection: live file, "), after.stderr
    assert after.stderr.rstrip().endswith(f"`runledger project` catches it up ({db})")

"""queries/report_sdc.py: the report's silent-data-corruption section (coverage from the
spec, suspicions, verdicts, rollbacks), as HTML in the page and as text; pure, over
hand-timed logs projected without Kafka."""

from __future__ import annotations

import json

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from queries.report import report, text
from queries.report_sdc import coverage, html_section, tallies, text_section
from tests.queries.test_report import parse
from tests.queries.timeline import SPEC, Timeline, project, sdc_run


class SdcTimeline(Timeline):
    """A run whose spec enables agreement every step, the digest every 50 and spikes."""

    sdc: dict[str, object] | None = None

    def submit(self, world_size: int = 2) -> None:
        spec = {**SPEC, **({} if self.sdc is None else {"sdc": self.sdc})}
        self.add(self.ev.submitted(spec_digest="sha256:s", spec_json=json.dumps(spec),
                                   world_size=world_size, dataset_id="sha256:d"))


def projected(sdc: dict[str, object] | None, verdict: str | None = "node_fault"
              ) -> duckdb.DuckDBPyConnection:
    tl = SdcTimeline()
    tl.sdc = sdc
    sdc_run(tl, verdict)
    con = duckdb.connect()
    project(con, tl)
    return con


# The spec's form (controller/spec/sdc.py): agreement every step with the digest every
# 50, gradients but not the optimizer state; spikes over 6 robust sigmas.
ON = {"agreement": {"every": 1, "full_every": 50, "optimizer": False},
      "invariants": {"spike_sigma": 6.0}}


def test_without_an_sdc_section_no_detector_runs() -> None:
    cover, problem = coverage(None)
    assert problem is None
    assert {c.detector: c.on for c in cover} == {
        "agreement": False, "digest": False, "nonfinite": False, "spike": False}
    assert coverage("null") == (cover, None)


def test_the_spec_section_sets_each_detector() -> None:
    cover, problem = coverage(json.dumps(ON))
    assert problem is None
    how = {c.detector: c.how for c in cover if c.on}
    assert set(how) == {"agreement", "digest", "nonfinite", "spike"}
    assert how["agreement"] == "fingerprint of parameters, gradients across replicas every step"
    assert how["digest"] == "full sha256 digest every 50 steps"
    assert "median + 6 x 1.4826 x MAD of the last 32 steps, after 8" in how["spike"]


def test_the_section_reads_as_the_controller_hands_it_to_the_workers() -> None:
    from events.sdcenv import SdcEnv
    from queries.report_sdc import spec_env

    assert spec_env(ON) == SdcEnv(agreement_every=1, full_every=50, optimizer=False,
                                  spike_sigma=6.0)
    assert spec_env({"agreement": {}}) == SdcEnv(agreement_every=1)
    assert spec_env({"invariants": {"nonfinite": False, "window": 64, "warmup": 0}}) == (
        SdcEnv(nonfinite=False, spike_window=64, spike_warmup=0))
    assert spec_env({}) == SdcEnv()
    assert spec_env(None) == SdcEnv(nonfinite=False)  # `sdc:` alone: no detector


@pytest.mark.parametrize("bad", ['{"agreement": {"every": -1}}', '{"every": 3}', '[1]', "{",
                                 '{"agreement": 3}', '{"invariants": {"sigma": 2}}',
                                 '{"invariants": {"spike_sigma": "high"}}'])
def test_an_unreadable_section_says_so_and_shows_the_defaults(bad: str) -> None:
    cover, problem = coverage(bad)
    assert problem is not None and bad in problem and "shown: the defaults" in problem
    assert cover == coverage("{}")[0]  # a section's defaults: the non-finite check


@given(st.lists(st.tuples(st.sampled_from(["agreement", "digest", "nonfinite", "spike"]),
                          st.sampled_from(["transient", "node_fault", "nondeterministic",
                                           "reproduced", None])), max_size=12))
def test_tallies_count_every_suspicion_once(pairs: list[tuple[str, str | None]]) -> None:
    rows = [{"sdc_detector": d, "verdict": v} for d, v in pairs]
    by_detector, by_verdict = tallies(rows)
    assert sum(by_detector.values()) == sum(by_verdict.values()) == len(rows)
    assert by_verdict.get("open", 0) == sum(1 for _, v in pairs if v is None)
    assert 0 not in by_detector.values() and 0 not in by_verdict.values()


def test_the_page_shows_coverage_the_suspicion_its_verdict_and_rollback() -> None:
    con = projected(ON)
    doc = parse(report(con, "run-a"))
    section = doc.by_id("sdc")
    assert "Silent data corruption" in section.find("h2")[0].text()
    cover = doc.by_id("sdc-coverage")
    assert cover.find("tr", data_detector="agreement")[0].cell("state") == "on"
    (row,) = doc.by_id("sdc-table").find("tr", data_generation="1")
    assert (row.cell("sdc_detector"), row.cell("sdc_step"), row.cell("sdc_ranks")) == (
        "agreement", "22", "1")
    assert (row.cell("verdict"), row.cell("rollback"), row.cell("steps_lost")) == (
        "node_fault", "step 15", "7")
    assert row.cell("sdc_nodes") == "node-a" and row.cell("revoked_checkpoints") == "0"
    tally = doc.by_id("sdc-facts").text()
    assert "agreement 1" in tally and "node_fault 1" in tally


def test_an_open_suspicion_shows_as_open_and_a_run_without_any_says_so() -> None:
    doc = parse(report(projected(None, verdict=None), "run-a"))
    (row,) = doc.by_id("sdc-table").find("tr", data_generation="1")
    assert row.cell("verdict") == "open"
    assert doc.by_id("sdc-coverage").find("tr", data_detector="agreement")[0].cell(
        "state") == "off"
    quiet = Timeline(run_id="run-q")
    quiet.submit()
    con = duckdb.connect()
    project(con, quiet)
    assert "no suspicions" in parse(report(con, "run-q")).by_id("sdc").text()


def test_the_text_form_says_the_same() -> None:
    out = text(projected(ON), "run-a", freshness="projection: live file")
    lines = out.splitlines()
    assert lines[0] == "Run run-a: live; 2 generation(s), final step 21"
    assert lines[1] == "projection: live file"
    assert "  agreement  on   fingerprint of parameters, gradients across replicas every step" \
        in lines
    assert "  spike      on   above median + 6 x 1.4826 x MAD of the last 32 steps, after 8" \
        in lines
    assert "suspicions: 1 (agreement 1); verdicts: node_fault 1" in lines
    assert ("  g1 step 22: agreement on ranks 1 (nodes node-a); verdict node_fault; rolled"
            " back to step 15, 0 checkpoint(s) revoked, 7 step(s) trained again") in lines


def test_log_strings_in_the_section_are_escaped() -> None:
    rows = [{"generation": 1, "fault_at": None, "sdc_detector": "spike", "sdc_step": 3,
             "sdc_ranks": "[]", "sdc_nodes": '["<b>n</b>"]', "verdict": None,
             "rollback_step": 0, "rollback_manifest": None, "revoked_checkpoints": 0,
             "steps_lost": 3, "verdict_detail": "<script>x</script>"}]
    page = html_section('{"spike_sigma": "<i>"}', rows, None)
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;b&gt;n&lt;/b&gt;" in page
    assert "ranks all (nodes <b>n</b>)" in text_section(None, rows)
    assert "rolled back to the start" in text_section(None, rows)


def test_a_suspicion_not_yet_a_failure_is_on_the_page_as_an_incident_too() -> None:
    tl = SdcTimeline()
    tl.submit()
    tl.admit()
    tl.start(1)
    tl.step(1, 1)
    tl.suspect(1, 2, ranks=(0,), detector="digest")
    con = duckdb.connect()
    project(con, tl)
    doc = parse(report(con, "run-a"))
    (inc,) = doc.by_id("incidents-table").find("tr", data_generation="1")
    assert inc.cell("failure_class") == "silent_corruption"
    assert inc.cell("detail") == "digest at step 2"
    (row,) = doc.by_id("sdc-table").find("tr", data_step="2")
    assert (row.cell("verdict"), row.cell("rollback"), row.cell("steps_lost")) == (
        "open", "the start", "2")

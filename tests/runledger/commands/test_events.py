"""runledger/commands/events.py: ``runledger events dump`` through the real console script,
each event with the fold's verdict.

``events tail`` ended by Ctrl-C is in tests/runledger/test_cli.py (the exit-status policy)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from events.kafka.clients import EventProducer
from events.topics import RUNS
from tests.events.builders import Ev
from tests.events.sample_events import MEMBERS, one_of_each

pytestmark = pytest.mark.kafka


def test_events_dump_shows_fold_verdicts(bootstrap: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    events = one_of_each(run)
    submitted, admitted = events[0], events[3]
    producer = EventProducer(bootstrap)
    producer.send(RUNS, submitted)
    producer.send(RUNS, admitted)
    ev = Ev(run, tick=1)
    producer.send(RUNS, ev.generation_started(1, members=MEMBERS, reason="admitted", n=50))
    producer.send(RUNS, ev.proposed(0, 5, n=51, manifest_path="m", manifest_digest="d",
                                    dataset_id=None))
    producer.flush()
    out = subprocess.run(
        [sys.executable, "-m", "runledger.cli", "events", "dump", "--topic", RUNS, "--run", run,
         "--json", "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=120, check=True,
    )
    docs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [d["type"] for d in docs] == [
        "RunSubmitted", "RunAdmitted", "GenerationStarted", "ManifestProposed"
    ]
    assert all(d["header"]["run_id"] == run for d in docs)
    assert docs[0]["payload"]["principal"] == "alice"
    assert [d["verdict"]["accepted"] for d in docs] == [True, True, True, False]
    assert docs[3]["verdict"]["reason"] == "stale_generation"


def test_status_summaries_are_dumped_as_summaries_and_not_tailed(bootstrap: str) -> None:
    """``runledger.status`` holds derived summaries, not events: ``dump`` shows the newest
    one of the run (never an undecodable record), ``tail`` says what to use instead."""
    from confluent_kafka import Producer

    from events.fold import apply
    from events.kafka.connection import client_config
    from events.partition import PARTITIONER
    from events.status import NO_NOTES, encode, note, summarize
    from events.topics import STATUS

    run = f"run-{uuid.uuid4().hex[:8]}"
    submitted, admitted = one_of_each(run)[0], one_of_each(run)[3]
    first = apply(None, submitted).state
    assert first is not None
    state = apply(first, admitted).state
    assert state is not None
    older = summarize(first, note(NO_NOTES, submitted), 1_000)
    newer = summarize(state, note(NO_NOTES, submitted), 2_000)
    # Placed as every producer of ours places a run's records (murmur2 of the run id).
    producer = Producer({**client_config(bootstrap), "partitioner": PARTITIONER})
    for rec in (older, newer):
        producer.produce(STATUS, key=run, value=encode(rec))
    producer.flush(30)
    cmd = [sys.executable, "-m", "runledger.cli", "events"]
    out = subprocess.run([*cmd, "dump", "--topic", STATUS, "--run", run, "--json",
                          "--bootstrap", bootstrap], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (doc,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert (doc["run_id"], doc["state"], doc["summarized_at"]) == (run, state.status.value, 2_000)
    assert "undecodable" not in out.stderr.lower()
    tail = subprocess.run([*cmd, "tail", "--topic", STATUS, "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=120)
    assert tail.returncode != 0 and "runledger status RUN --watch" in tail.stderr

"""events.kafka.runkeys: a worker's report is believed only under its own run's key, vouched for
by a node hosting that run's generation.

Pure (the judge and the run key file); the real agent, workers and controller in
tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path

import pytest

from events.codec import default_codec
from events.kafka.reportdoor import judge_report
from events.kafka.runkeys import (
    BAD_CERT,
    CERT_HEADER,
    NODE_MISMATCH,
    NOT_PLACED,
    WRONG_RUN,
    Cert,
    RunKey,
    RunKeyError,
    from_environ,
    judge_worker_report,
)
from events.model import Event
from events.record import Record
from events.signed.keyring import (
    BAD_SIGNATURE,
    EMPTY,
    REVOKED_KEY,
    UNKNOWN_KEY,
    UNSIGNED,
    WRONG_PRINCIPAL,
    KeyRing,
)
from events.signed.signing import SigningKey, sign_report
from events.topics import REPORTS
from tests.events.builders import Ev
from tests.events.signed_log import node_rings

CODEC = default_codec()
N1, N2, N3 = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()


RING, REVOKED = node_rings({"node-a": N1, "node-b": N2, "node-c": N3}, revoked="node-c")
R1, R2 = Ev("r1"), Ev("r2")
KEY_A = RunKey.issue(N1, "r1", 1, "node-a")


def hosts(run_id: str, generation: int) -> frozenset[str] | None:
    """The model places r1's generation 1 on node-a and node-b; it knows nothing else."""
    return frozenset({"node-a", "node-b"}) if (run_id, generation) == ("r1", 1) else None


def record(event: Event, key: RunKey | None, value: bytes | None = None,
           headers: tuple[tuple[str, bytes], ...] | None = None) -> Record:
    value = CODEC.encode(event) if value is None else value
    if headers is None:
        headers = key.headers(value) if key is not None else ()
    return Record(REPORTS, 2, 40, 0, event, 1, value=CODEC.encode(event), headers=headers)


def reason(rec: Record, ring: KeyRing = RING, require: bool = True) -> str | None:
    refusal = judge_worker_report(ring, rec, require=require, hosts=hosts)
    return refusal[0] if refusal is not None else None


def test_a_report_signed_with_its_runs_key_from_a_hosting_node_is_believed() -> None:
    for event in (R1.heartbeat(1), R1.step(1, 3), R1.shard(1, 3), R1.proposed(1, 3)):
        assert reason(record(event, KEY_A)) is None, event.event_type
    # Through the one door of reports too.
    assert judge_report(RING, record(R1.heartbeat(1), KEY_A), require=True, hosts=hosts) is None
    # node-b hosts r1 too, with its own key for it.
    hb = Ev("r1").heartbeat(1)
    assert reason(record(replace(hb, node="node-b"), RunKey.issue(N2, "r1", 1, "node-b"))) is None


def test_another_runs_key_cannot_speak_for_this_run() -> None:
    """The attack: a job of run r2 on node-a forges r1's heartbeat (or proposal)."""
    theirs = RunKey.issue(N1, "r2", 1, "node-a")
    assert reason(record(R1.heartbeat(1), theirs)) == WRONG_RUN
    assert reason(record(R1.proposed(1, 5), theirs)) == WRONG_RUN
    # Nor another generation's key of the same run.
    assert reason(record(R1.heartbeat(1), RunKey.issue(N1, "r1", 2, "node-a"))) == WRONG_RUN


def test_a_cert_edited_to_name_this_run_no_longer_verifies() -> None:
    theirs = RunKey.issue(N1, "r2", 1, "node-a")
    forged = RunKey(theirs.key, Cert("r1", 1, "node-a", theirs.cert.public,
                                     theirs.cert.node_key_id, theirs.cert.signature))
    assert reason(record(R1.heartbeat(1), forged)) == BAD_SIGNATURE


def test_a_node_not_hosting_the_generation_cannot_vouch_for_it() -> None:
    # node-c is no host of r1 generation 1 (and its key is revoked in REVOKED).
    hb = R1.heartbeat(1)
    c_hb = replace(hb, node="node-c")
    assert reason(record(c_hb, RunKey.issue(N3, "r1", 1, "node-c"))) == NOT_PLACED
    assert reason(record(c_hb, RunKey.issue(N3, "r1", 1, "node-c")), ring=REVOKED) == REVOKED_KEY
    # A cert signed by node-a's key but naming node-b is no node-b's word.
    assert reason(record(replace(hb, node="node-b"), RunKey.issue(N1, "r1", 1, "node-b"))) \
        == WRONG_PRINCIPAL
    # A report naming another node than its cert.
    assert reason(record(replace(hb, node="node-b"), KEY_A)) == NODE_MISMATCH


def test_a_key_nobody_registered_and_a_self_made_cert_are_refused() -> None:
    assert reason(record(R1.heartbeat(1), RunKey.issue(SigningKey.generate(), "r1", 1,
                                                       "node-a"))) == UNKNOWN_KEY


def test_altered_bytes_a_missing_cert_or_an_agents_signature_are_refused() -> None:
    event = R1.step(1, 3)
    other = CODEC.encode(R1.step(1, 4))
    assert reason(record(event, KEY_A, value=other)) == BAD_SIGNATURE
    signed = KEY_A.headers(CODEC.encode(event))
    no_cert = tuple(h for h in signed if h[0] != CERT_HEADER)
    assert reason(record(event, None, headers=no_cert)) == BAD_CERT
    assert reason(record(event, None, headers=(*signed, (CERT_HEADER, b"[]")))) == BAD_CERT
    assert reason(record(event, None, headers=(*no_cert, (CERT_HEADER, b"{not json")))) \
        == BAD_CERT
    # A node key's own report signature over a worker's report: no run key, no cert.
    assert reason(record(event, None, headers=sign_report(N1, CODEC.encode(event)))) == BAD_CERT


def test_unsigned_is_refused_once_the_keys_log_has_an_anchor_and_named() -> None:
    rec = record(R1.heartbeat(1), None)
    assert reason(rec) == UNSIGNED
    assert reason(rec, ring=EMPTY, require=False) is None
    refusal = judge_worker_report(RING, record(R1.heartbeat(1), RunKey.issue(N1, "r2", 1,
                                                                          "node-a")),
                                  require=True, hosts=hosts)
    assert refusal is not None
    assert "HeartbeatRecorded of run r1 generation 1 at runledger.reports[2]@40" in refusal[1]
    assert "nothing of it is believed" in refusal[1]


def test_a_generation_the_reader_does_not_know_is_judged_on_the_cert_alone() -> None:
    # r1 generation 2 has no known hosts: any node's certified key for it is believed,
    # and the run's own fencing judges the generation.
    assert reason(record(R1.heartbeat(2), RunKey.issue(N3, "r1", 2, "node-a"))) \
        == WRONG_PRINCIPAL
    assert reason(record(R1.heartbeat(2), RunKey.issue(N1, "r1", 2, "node-a"))) is None


def test_the_run_key_file_is_owner_only_round_trips_and_names_what_is_wrong(
        tmp_path: Path) -> None:
    path = tmp_path / "r1.g1.json"
    KEY_A.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = from_environ({"RUNLEDGER_WORKER_KEY": str(path)})
    assert back is not None and back.cert == KEY_A.cert and back.key.key_id == KEY_A.key.key_id
    assert from_environ({}) is None
    with pytest.raises(FileExistsError):
        KEY_A.save(path)  # never over an existing file
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 9}')
    with pytest.raises(RunKeyError, match=r"bad.json \(RUNLEDGER_WORKER_KEY\).*version 9"):
        RunKey.load(bad)
    mixed = tmp_path / "mixed.json"
    other = RunKey.issue(N1, "r1", 1, "node-a")
    RunKey(other.key, KEY_A.cert).save(mixed)
    with pytest.raises(RunKeyError, match="does not match its certificate"):
        RunKey.load(mixed)

"""events.kafka.reportdoor: an agent's report about node N is believed only under N's live key.

Pure (the door's judge and its ring-keeping shell with a ring given in memory);
the real controller, agents and ``runledger nodes`` in tests/e2e/test_node_identity.py.
"""

from __future__ import annotations

from events.codec import default_codec
from events.kafka.reportdoor import (
    NODE_MISMATCH,
    REREAD_BURST,
    REREAD_S,
    ReportDoor,
    about,
    judge_report,
    node_principal,
    required,
)
from events.model import Event, WorkerExited
from events.record import Record
from events.signed.audit import fold_keys
from events.signed.keyring import (
    BAD_SIGNATURE,
    EMPTY,
    REVOKED_KEY,
    UNKNOWN_KEY,
    UNSIGNED,
    WRONG_PRINCIPAL,
    WRONG_ROLE,
    KeyRing,
)
from events.signed.signing import SigningKey, sign_report, sign_request
from events.topics import REPORTS
from tests.events.builders import Ev
from tests.events.signed_log import CAST, cast_keys, node_rings

CODEC = default_codec()
N1, N2 = SigningKey.generate(), SigningKey.generate()


# The ring with n1's and n2's node keys; and the same after n2's is revoked.
RING, REVOKED = node_rings({"n1": N1, "n2": N2}, revoked="n2")
EV = Ev("r1")


def report(event: Event, key: SigningKey | None, value: bytes | None = None,
           request: bool = False) -> Record:
    value = value if value is not None else CODEC.encode(event)
    sign = sign_request if request else sign_report
    headers = () if key is None else sign(key, value)
    return Record(REPORTS, 3, 70, 0, event, 1, value=CODEC.encode(event), headers=headers)


def exited(node: str, logical_id: str = "w1", gen: int = 1) -> WorkerExited:
    return WorkerExited(header=EV.heartbeat(gen).header, logical_id=logical_id, node=node,
                        exit_code=1)


def on_n1(event: WorkerExited) -> str | None:
    """The membership of run r1's generation 1 places w1 on n1."""
    key = (event.run_id, event.header.generation, event.logical_id)
    return "n1" if key == ("r1", 1, "w1") else None


def reason(record: Record, ring: KeyRing = RING, require: bool = True) -> str | None:
    refusal = judge_report(ring, record, require=require, placed=on_n1)
    return refusal[0] if refusal is not None else None


def test_a_node_record_signed_by_its_own_node_key_is_believed() -> None:
    assert reason(report(EV.agent_registered("n1"), N1)) is None
    assert reason(report(EV.agent_heartbeat("n2"), N2)) is None
    assert reason(report(exited("n1"), N1)) is None


def test_another_nodes_key_or_nobodys_is_refused_whatever_node_it_names() -> None:
    # n2's live key speaking for n1: a heartbeat, an exit of n1's member naming n1,
    # and one naming n2 (the membership, not the record, says whose member it is).
    assert reason(report(EV.agent_heartbeat("n1"), N2)) == WRONG_PRINCIPAL
    assert reason(report(exited("n1"), N2)) == WRONG_PRINCIPAL
    assert reason(report(exited("n2"), N2)) == WRONG_PRINCIPAL
    assert reason(report(EV.agent_registered("n1"), CAST.stranger)) == UNKNOWN_KEY
    assert reason(report(EV.agent_registered("n1"), CAST.alice)) == WRONG_PRINCIPAL
    assert reason(report(EV.agent_registered("n2"), N2), ring=REVOKED) == REVOKED_KEY


def test_an_exit_signed_by_the_members_node_must_name_that_node() -> None:
    assert reason(report(exited("n2"), N1)) == NODE_MISMATCH
    # Another generation (its placement is not kept): judged by the node it names.
    assert reason(report(exited("n2", gen=0), N2)) is None
    assert reason(report(exited("n1", gen=0), N2)) == WRONG_PRINCIPAL
    # A run the reader does not know: the exit is judged by the node it names.
    stray = WorkerExited(header=Ev("r9").heartbeat(1).header, logical_id="w1", node="n2",
                         exit_code=0)
    assert reason(report(stray, N2)) is None
    assert reason(report(stray, N1)) == WRONG_PRINCIPAL


def test_altered_bytes_and_a_signature_made_for_another_use_are_refused() -> None:
    other = CODEC.encode(EV.agent_heartbeat("n1", busy_slots=0))
    assert reason(report(EV.agent_heartbeat("n1"), N1, value=other)) == BAD_SIGNATURE
    # n1's key over the same bytes, but as a request: not a report signature.
    assert reason(report(EV.agent_heartbeat("n1"), N1, request=True)) == BAD_SIGNATURE


def test_an_agent_key_of_a_name_that_is_no_node_and_a_key_of_another_role() -> None:
    keys = cast_keys()
    keys.register(node_principal("n3"), "operator", N1)
    ring, _ = fold_keys(keys.records)
    assert reason(report(EV.agent_heartbeat("n3"), N1), ring=ring) == WRONG_ROLE
    # tests.events.signed_log registers CAST.agent to "node-a", not "node.node-a".
    assert reason(report(EV.agent_heartbeat("node-a"), CAST.agent)) == WRONG_PRINCIPAL


def test_unsigned_is_refused_once_the_keys_log_has_an_anchor() -> None:
    assert required(RING) and not required(EMPTY)
    assert reason(report(EV.agent_heartbeat("n1"), None)) == UNSIGNED
    assert reason(report(EV.agent_heartbeat("n1"), None), ring=EMPTY, require=False) is None
    # A bad signature is refused even where unsigned reports are taken.
    assert reason(report(EV.agent_heartbeat("n1"), N2), require=False) == WRONG_PRINCIPAL


def test_the_refusal_names_the_node_the_record_and_what_to_do() -> None:
    refusal = judge_report(RING, report(exited("n2"), N2), require=True, placed=on_n1)
    assert refusal is not None
    assert "about node 'n1'" in refusal[1] and "member w1 of run r1" in refusal[1]
    assert "runledger.reports[3]@70" in refusal[1]
    assert "runledger node enroll n1" in refusal[1]


def test_workers_reports_are_not_the_agents_to_sign_but_their_runs() -> None:
    # A worker's report is no node's (kafka.runkeys judges it: tests/events/kafka/test_runkeys.py).
    assert about(EV.heartbeat(1)) is None
    assert reason(report(EV.heartbeat(1), None)) == UNSIGNED
    assert reason(report(EV.heartbeat(1), None), ring=EMPTY, require=False) is None


def test_the_door_also_quarantines_strays_and_reads_the_ring_again_for_a_new_key() -> None:
    reads = [EMPTY, RING]
    now = [0.0]
    door = ReportDoor(lambda: reads.pop(0), clock=lambda: now[0])
    assert door.ring is EMPTY
    # n1 enrolled after the ring was read: an unknown key makes the door read it again.
    signed = report(EV.agent_heartbeat("n1"), N1)
    assert door.admit(signed, len(signed.value)) is None and door.ring is RING
    # A NodeQuarantined is the controller's fact: on reports it is a stray, signed or not.
    forged = report(EV.quarantined("n1"), N1)
    refused = door.admit(forged, len(forged.value))
    assert refused is not None and refused.reason == "stray"
    unsigned = report(EV.agent_registered("n2"), None)
    refused = door.admit(unsigned, len(unsigned.value))
    assert refused is not None and refused.reason == UNSIGNED


def test_a_flood_of_unknown_keys_reads_the_keys_log_a_bounded_number_of_times() -> None:
    reads: list[int] = []
    now = [0.0]

    def read() -> KeyRing:
        reads.append(1)
        return RING

    door = ReportDoor(read, clock=lambda: now[0])
    for _ in range(100):  # forged reports, each under a key nobody registered
        forged = report(EV.agent_heartbeat("n1"), SigningKey.generate())
        refused = door.admit(forged, len(forged.value))
        assert refused is not None and refused.reason == UNKNOWN_KEY
    assert len(reads) == 1 + REREAD_BURST
    now[0] += 3 * REREAD_S  # three more reads earned, no more
    for _ in range(10):
        forged = report(EV.agent_heartbeat("n1"), SigningKey.generate())
        door.admit(forged, len(forged.value))
    assert len(reads) == 1 + REREAD_BURST + 3

"""Whether the controller's records fit one Kafka record (controller.fit), measured before
they are signed: the measure equals the stored size of the signed record exactly, and the
largest request ``submit`` lets through always leaves room for its copy.

Pure: real Ed25519 keys and the real codec, no broker.
"""

from __future__ import annotations

from controller.chains import outgoing, sign
from controller.fit import stored_bytes, too_large
from events.kafka.clients import WRITER_HEADER, event_headers
from events.limits import MAX_REQUEST_BYTES, MAX_SPEC_BYTES, RECORD_MAX_BYTES, record_bytes
from events.model import GroupStopCommanded, Header, RunSubmitted
from events.signed.signing import SigningKey, sign_request
from events.topics import COMMANDS, RUNS
from tests.controller.test_chains import request_record
from tests.events.builders import Ev
from tests.events.signed_log import CODEC

RUN = "r" * 128  # the longest run id
WRITER = "w" * 255  # a long transactional id


def version_of(event_type: str) -> int:
    return CODEC.registry.latest(event_type).version


def submitted(spec_bytes: int, run: str = RUN) -> RunSubmitted:
    """A request at the edge: the longest ids and principal, a spec of ``spec_bytes``."""
    return RunSubmitted(
        header=Header(event_id=f"{run}/submitted", run_id=run, generation=0,
                      occurred_at=1, producer="cli/" + "a" * 128),
        spec_digest="sha256:" + "0" * 64, spec_json="x" * spec_bytes, principal="a" * 128,
        world_size=2, dataset_id="sha256:" + "ab" * 32)


def test_the_measure_is_the_signed_record_exactly() -> None:
    key = SigningKey.generate()
    copy = submitted(1000)
    stop = GroupStopCommanded(header=Ev(RUN).h(1), command_id="c", node="n1", reason="r")
    for signing in (key, None):
        out = outgoing([(RUNS, copy, CODEC.encode(copy))], request_record(copy))
        out += outgoing([(COMMANDS, stop, CODEC.encode(stop))])
        signed, _ = sign(signing, {}, out)
        for record in signed:
            headers = [*event_headers(record.event, version_of(record.event.event_type)),
                       (WRITER_HEADER, WRITER.encode()), *record.headers]
            actual = record_bytes(record.event.run_id, len(record.value), headers)
            key_id = signing.key_id if signing is not None else None
            assert stored_bytes(record, WRITER, key_id, version_of) == actual


def test_the_largest_request_submit_sends_leaves_room_for_its_signed_copy() -> None:
    key = SigningKey.generate()
    request = submitted(MAX_SPEC_BYTES)
    value = CODEC.encode(request)
    sent = record_bytes(RUN, len(value), [*event_headers(request, 1),
                                          *sign_request(key, value)])
    assert sent <= MAX_REQUEST_BYTES
    copy = outgoing([(RUNS, request, value)], request_record(request))
    assert too_large(copy, WRITER, key.key_id, version_of) is None
    assert stored_bytes(copy[0], WRITER, key.key_id, version_of) <= RECORD_MAX_BYTES


def test_a_copy_that_would_not_fit_is_named_with_its_size_and_the_limit() -> None:
    request = submitted(RECORD_MAX_BYTES - 900)
    copy = outgoing([(RUNS, request, CODEC.encode(request))], request_record(request))
    size = stored_bytes(copy[0], WRITER, None, version_of)
    assert size > RECORD_MAX_BYTES
    assert too_large(copy, WRITER, None, version_of) == (
        f"RunSubmitted: its copy on {RUNS} would be {size} bytes with its headers; the limit "
        f"is {RECORD_MAX_BYTES} bytes (a request may be at most {MAX_REQUEST_BYTES} bytes: "
        "submit it again with a smaller spec)")

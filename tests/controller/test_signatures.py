"""controller.signatures: a request's principal is believed only on a valid operator
signature of that principal's own key. Pure; the controller in tests/e2e/test_signed.py."""

from __future__ import annotations

from controller.signatures import judge_request
from events.codec import default_codec
from events.model import Event
from events.record import Record
from events.signed.audit import fold_keys
from events.signed.keyring import BAD_SIGNATURE, UNKNOWN_KEY, UNSIGNED, WRONG_PRINCIPAL
from events.signed.signing import SigningKey, sign_request
from events.topics import REQUESTS
from tests.events.builders import Ev
from tests.events.signed_log import CAST, cast_keys

CODEC = default_codec()
RING, _ = fold_keys(cast_keys().records)  # alice and bob are operators


def request(event: Event, key: SigningKey | None, value: bytes | None = None) -> Record:
    value = value if value is not None else CODEC.encode(event)
    headers = () if key is None else tuple(
        (k, v if isinstance(v, bytes) else str(v).encode()) for k, v in sign_request(key, value))
    return Record(REQUESTS, 2, 40, 0, event, 1, value=CODEC.encode(event), headers=headers)


def cancel(principal: str) -> Event:
    return Ev("r1").cancel_requested(principal=principal, reason="test")


def test_a_request_signed_by_its_principal_is_taken() -> None:
    assert judge_request(RING, request(cancel("alice"), CAST.alice), require=True) is None


def test_unsigned_is_refused_only_when_signatures_are_required() -> None:
    assert judge_request(RING, request(cancel("alice"), None), require=False) is None
    refusal = judge_request(RING, request(cancel("alice"), None), require=True)
    assert refusal is not None and refusal[0] == UNSIGNED
    assert "runledger.requests[2]@40" in refusal[1] and "--key" in refusal[1]


def test_a_signature_for_another_principals_name_is_refused() -> None:
    # bob signs, with his own valid key, a cancel that claims alice asked.
    for require in (True, False):
        refusal = judge_request(RING, request(cancel("alice"), CAST.bob), require=require)
        assert refusal is not None and refusal[0] == WRONG_PRINCIPAL
    refusal = judge_request(RING, request(cancel("controller"), CAST.controller), require=True)
    assert refusal is not None  # the controller's key is no operator's


def test_altered_bytes_and_unknown_keys_are_refused() -> None:
    other = CODEC.encode(cancel("bob"))  # alice's signature over other bytes
    refusal = judge_request(RING, request(cancel("alice"), CAST.alice, value=other), require=False)
    assert refusal is not None and refusal[0] == BAD_SIGNATURE
    refusal = judge_request(RING, request(cancel("alice"), CAST.stranger), require=False)
    assert refusal is not None and refusal[0] == UNKNOWN_KEY


def test_a_submission_is_judged_and_a_report_is_not() -> None:
    submitted = Ev("r1").submitted(principal="bob")
    assert judge_request(RING, request(submitted, CAST.bob), require=True) is None
    refusal = judge_request(RING, request(submitted, CAST.alice), require=True)
    assert refusal is not None and refusal[0] == WRONG_PRINCIPAL
    beat = Ev("r1").heartbeat(1, "w0")
    assert judge_request(RING, request(beat, None), require=True) is None

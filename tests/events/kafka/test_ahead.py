"""events.kafka.ahead: signatures verified on threads before the door judges them.

Pure (a ring in memory, records signed as agents and workers sign them); the
projector that uses it against a real broker in tests/projectors/test_projector.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import nacl.signing
import pytest

from events.codec import default_codec
from events.kafka.ahead import Ahead, signed
from events.kafka.reportdoor import judge_report
from events.kafka.runkeys import RunKey
from events.model import Event
from events.record import Quarantined, Record
from events.signed.keyring import BAD_SIGNATURE, UNKNOWN_KEY
from events.signed.signing import SigningKey, sign_report
from events.topics import REPORTS, RUNS
from tests.events.builders import Ev
from tests.events.signed_log import node_rings

CODEC = default_codec()
N1, N2 = SigningKey.generate(), SigningKey.generate()
RING, _ = node_rings({"n1": N1, "n2": N2}, revoked="n2")
EV = Ev("r1")


def hosts(run_id: str, generation: int) -> frozenset[str] | None:
    return frozenset({"n1"})


def agent(event: Event, key: SigningKey, topic: str = REPORTS) -> Record:
    value = CODEC.encode(event)
    return Record(topic, 0, 1, 0, event, 1, value=value, headers=sign_report(key, value))


def worker(event: Event, key: RunKey) -> Record:
    value = CODEC.encode(event)
    return Record(REPORTS, 0, 1, 0, event, 1, value=value, headers=key.headers(value))


@pytest.fixture
def libsodium_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """The messages libsodium is asked to verify on this thread while the test runs."""
    calls: list[bytes] = []
    real = nacl.signing.VerifyKey.verify

    def counting(self: nacl.signing.VerifyKey, smessage: bytes, signature: bytes | None = None,
                 **kwargs: object) -> bytes:
        calls.append(smessage)
        return real(self, smessage, signature, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nacl.signing.VerifyKey, "verify", counting)
    yield calls


def test_the_guess_is_the_key_message_and_signature_the_door_verifies(
        libsodium_calls: list[bytes]) -> None:
    # Fresh events (new ids): nothing of them is in the memo of verified signatures.
    beat = agent(EV.agent_heartbeat("n1"), N1)
    run_key = RunKey.issue(N1, "r1", 1, "n1")
    work = worker(replace(EV.heartbeat(1, "w1"), node="n1"), run_key)
    guessed = [signed(RING, beat), signed(RING, work)]
    assert [g[0].raw if g else None for g in guessed] == [
        N1.public.raw, run_key.key.public.raw]
    assert all(judge_report(RING, r, require=True, hosts=hosts) is None for r in (beat, work))
    # The door verified each guessed message (and the certificate's, once per certificate).
    assert {g[1] for g in guessed if g} <= set(libsodium_calls)


def test_after_the_threads_the_door_verifies_nothing_and_judges_the_same(
        libsodium_calls: list[bytes]) -> None:
    run_key = RunKey.issue(N1, "r1", 1, "n1")
    good = [agent(EV.agent_heartbeat("n1"), N1) for _ in range(20)]
    good += [worker(replace(EV.heartbeat(1, "w1", step=i), node="n1"), run_key)
             for i in range(20)]
    # One judged first: its certificate's node signature is then memoized (once per
    # certificate), and its own signature is in the memo already.
    assert judge_report(RING, good[-1], require=True, hosts=hosts) is None
    ahead = Ahead(2)
    try:
        assert ahead.check(RING, good).wait() == len(good)
    finally:
        ahead.close()
    libsodium_calls.clear()
    assert [judge_report(RING, r, require=True, hosts=hosts) for r in good] == [None] * len(good)
    assert libsodium_calls == []


def test_a_bad_signature_verified_ahead_is_still_refused_by_the_door(
        libsodium_calls: list[bytes]) -> None:
    forged = agent(EV.agent_heartbeat("n1"), N1)
    value = bytearray(forged.value)
    value[-1] ^= 1
    bad = Record(REPORTS, 0, 1, 0, forged.event, 1, value=bytes(value), headers=forged.headers)
    ahead = Ahead(1)
    try:
        assert ahead.check(RING, [bad]).wait() == 0
    finally:
        ahead.close()
    libsodium_calls.clear()
    refusal = judge_report(RING, bad, require=True)
    assert refusal is not None and refusal[0] == BAD_SIGNATURE
    assert len(libsodium_calls) == 1  # a no is never remembered: the door verified it again


def test_what_names_no_known_key_or_is_no_report_is_not_verified_ahead() -> None:
    stranger = agent(EV.agent_heartbeat("n1"), SigningKey.generate())
    assert signed(RING, stranger) is None
    assert judge_report(RING, stranger, require=True) is not None
    assert judge_report(RING, stranger, require=True)[0] == UNKNOWN_KEY  # type: ignore[index]
    assert signed(RING, agent(EV.agent_heartbeat("n1"), N1, topic=RUNS)) is None
    unsigned = Record(REPORTS, 0, 1, 0, EV.heartbeat(1), 1, value=b"x", headers=())
    assert signed(RING, unsigned) is None
    # A certificate whose run key is not the one that signed: refused without a check.
    run_key, other = RunKey.issue(N1, "r1", 1, "n1"), RunKey.issue(N1, "r1", 1, "n1")
    event = replace(EV.heartbeat(1), node="n1")
    value = CODEC.encode(event)
    swapped = tuple((k, v) for k, v in run_key.headers(value) if k != "runledger-cert") + tuple(
        (k, v) for k, v in other.headers(value) if k == "runledger-cert")
    assert signed(RING, Record(REPORTS, 0, 1, 0, event, 1, value=value, headers=swapped)) is None
    ahead = Ahead(1)
    try:
        assert ahead.check(RING, [Quarantined(REPORTS, 0, 1, "empty", "no bytes")]).wait() == 0
    finally:
        ahead.close()


def test_threads_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Ahead(0)

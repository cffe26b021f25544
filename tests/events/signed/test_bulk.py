"""events.signed.bulk: a batch of signatures verified in one compiled call, held to
``PublicKey.verify`` (libsodium one at a time) on good, altered and garbled bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.signed import bulk
from events.signed.seen import SEEN
from events.signed.signing import PublicKey, SigningKey

KEYS = [SigningKey.generate() for _ in range(3)]


def one_at_a_time(work: bulk.Work) -> list[bool]:
    # A fresh PublicKey per check: nothing of the memo answers for it.
    SEEN.clear()
    return [PublicKey(p.raw).verify(m, s) for p, m, s in work]


def test_the_compiled_path_is_built_and_used() -> None:
    # make venv builds native/; an install without it verifies one at a time.
    assert bulk.native is not None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=300), st.integers(0, 2),
                          st.sampled_from(["keep", "flip_message", "flip_signature", "cut",
                                           "long", "empty"]),
                          st.integers(0, 10_000)),
                min_size=1, max_size=40),
       st.integers(1, 4))
def test_bulk_answers_what_one_at_a_time_answers(
        cases: list[tuple[int, bytes, int, str, int]], threads: int) -> None:
    work: list[tuple[PublicKey, bytes, bytes]] = []
    for signer, message, checker, change, at in cases:
        sig = KEYS[signer].sign(message)
        if change == "flip_message" and message:
            i = at % len(message)
            message = message[:i] + bytes([message[i] ^ 1 << at % 8]) + message[i + 1:]
        elif change == "flip_signature":
            i = at % len(sig)
            sig = sig[:i] + bytes([sig[i] ^ 1 << at % 8]) + sig[i + 1:]
        elif change == "cut":
            sig = sig[:at % len(sig)]
        elif change == "long":
            sig += b"\x00"
        elif change == "empty":
            sig = b""
        work.append((KEYS[checker].public, message, sig))
    expected = one_at_a_time(work)
    SEEN.clear()
    assert bulk.verify_many(work, threads) == expected
    # Every yes, and only a yes, is remembered for the door.
    assert [SEEN.digest(p.raw, s, m) in SEEN for p, m, s in work] == expected


def test_without_the_compiled_module_the_answers_are_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    good = [(KEYS[0].public, b"m%d" % i, KEYS[0].sign(b"m%d" % i)) for i in range(5)]
    bad = [(KEYS[1].public, b"m0", good[0][2])]
    SEEN.clear()
    compiled = bulk.verify_many(good + bad, 2)
    monkeypatch.setattr(bulk, "native", None)
    SEEN.clear()
    assert bulk.verify_many(good + bad, 2) == compiled == [True] * 5 + [False]
    assert bulk.verify_many([], 2) == []


def test_a_batch_must_come_whole() -> None:
    assert bulk.native is not None
    with pytest.raises(ValueError, match="one of each per signature"):
        bulk.native.verify_many(bulk._VERIFY, [b"k"], [], [], 1)
    with pytest.raises(ValueError, match="must be bytes"):
        bulk.native.verify_many(bulk._VERIFY, ["k"], [b"m"], [b"s"], 1)

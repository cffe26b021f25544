"""signed/signing.py: Ed25519 keys on disk, domain-separated messages, digests and headers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.signed.seen import Seen
from events.signed.signing import (
    GENESIS,
    KEY_HEADER,
    KEYS_HEAD_HEADER,
    PREV_HEADER,
    REQUEST_KEY_HEADER,
    REQUEST_SIG_HEADER,
    SIG_HEADER,
    PublicKey,
    SigningKey,
    command_message,
    fact_digest,
    fact_message,
    key_digest,
    key_id_of,
    key_message,
    prev_of,
    report_message,
    request_message,
    sign_command,
    sign_fact,
    sign_key_record,
    sign_report,
    sign_request,
    signature_of,
)

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
VALUE = b"\xc3\x01" + bytes(range(40))


def test_a_signature_verifies_with_its_key_only() -> None:
    sig = KEY.sign(b"hello")
    assert len(sig) == 64
    assert KEY.public.verify(b"hello", sig)
    assert not KEY.public.verify(b"hellO", sig)
    assert not OTHER.public.verify(b"hello", sig)


def test_a_remembered_signature_still_verifies_nothing_else() -> None:
    """The process remembers what it verified (events.signed.seen): a record read twice is
    checked once, and the memory never says yes for another message, key or signature."""
    sig = KEY.sign(b"remembered")
    calls = []
    real = KEY.public._key.verify  # type: ignore[attr-defined]

    class Counting:
        def verify(self, message: bytes, signature: bytes) -> bytes:
            calls.append(message)
            return real(message, signature)  # type: ignore[no-any-return]

    public = PublicKey(KEY.public.raw)
    public._key = Counting()  # type: ignore[attr-defined,assignment]
    assert public.verify(b"remembered", sig) and public.verify(b"remembered", sig)
    assert calls == [b"remembered"]
    assert not public.verify(b"rememberee", sig)
    assert not OTHER.public.verify(b"remembered", sig)
    assert not public.verify(b"remembered", sig[:-1] + bytes([sig[-1] ^ 1]))


def test_the_memory_is_bounded_oldest_out_first() -> None:
    seen = Seen(3)
    for d in (b"a", b"b", b"c", b"d"):
        seen.add(d)
    assert b"a" not in seen and all(d in seen for d in (b"b", b"c", b"d"))


@pytest.mark.parametrize("bad", [b"", b"x", b"x" * 63, b"x" * 65, b"\x00" * 64])
def test_verify_answers_false_never_raises(bad: bytes) -> None:
    assert KEY.public.verify(b"hello", bad) is False


def test_public_key_from_raw_and_its_id() -> None:
    raw = KEY.public.raw
    assert len(raw) == 32
    again = PublicKey.from_raw(raw)
    assert again == KEY.public and hash(again) == hash(KEY.public)
    assert again.key_id == KEY.key_id == key_id_of(raw)
    assert len(again.key_id) == 16 and int(again.key_id, 16) >= 0
    assert KEY.key_id in repr(KEY) and KEY.key_id in repr(KEY.public)
    with pytest.raises(ValueError):
        PublicKey.from_raw(raw[:31])


def test_save_writes_pkcs8_pem_mode_0600_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "operator.pem"
    old = os.umask(0)  # the mode must not depend on the umask
    try:
        KEY.save(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = SigningKey.load(path)
    assert loaded.public == KEY.public
    assert KEY.public.verify(b"m", loaded.sign(b"m"))
    with pytest.raises(FileExistsError):
        OTHER.save(path)
    assert SigningKey.load(path).public == KEY.public


def test_save_refuses_a_link_in_the_way(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "key.pem"
    link.symlink_to(target)
    with pytest.raises(FileExistsError):
        KEY.save(link)
    assert not target.exists()


def test_load_refuses_another_kind_of_key(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    path = tmp_path / "ec.pem"
    path.write_bytes(pem)
    with pytest.raises(ValueError, match="not an Ed25519"):
        SigningKey.load(path)


def test_each_use_signs_a_different_message() -> None:
    messages = [request_message(VALUE), command_message(VALUE), key_message(GENESIS, VALUE),
                fact_message(GENESIS, VALUE), fact_message(GENESIS, VALUE, GENESIS),
                report_message(VALUE)]
    assert len(set(messages)) == 6
    assert all(m.endswith(VALUE) and b"\x00" in m for m in messages)
    # A request signature is worthless as a command, a fact, a key record or a report.
    sig = KEY.sign(request_message(VALUE))
    assert [KEY.public.verify(m, sig) for m in messages] == [True] + [False] * 5
    # And a node's report signature is worthless as anything else.
    sig = KEY.sign(report_message(VALUE))
    assert [KEY.public.verify(m, sig) for m in messages] == [False] * 5 + [True]
    # An old (v1) fact's signature is no anchored (v2) fact's, whatever keys head is added.
    v1 = KEY.sign(fact_message(GENESIS, VALUE))
    assert not KEY.public.verify(fact_message(GENESIS, VALUE, GENESIS), v1)


def test_key_message_binds_the_previous_key_record_and_facts_the_keys_head() -> None:
    prev = key_digest(b"before", KEY.sign(b"before"))
    assert key_message(prev, VALUE) != key_message(GENESIS, VALUE)
    assert fact_message(GENESIS, VALUE, prev) != fact_message(GENESIS, VALUE, GENESIS)
    assert key_digest(b"v", b"s") != fact_digest(b"v", b"s")  # a key link is no fact link
    with pytest.raises(ValueError, match="prev digest"):
        key_message("abc", VALUE)
    with pytest.raises(ValueError, match="keys head digest"):
        fact_message(GENESIS, VALUE, "abc")


def test_fact_message_binds_the_previous_digest() -> None:
    prev = fact_digest(b"before", KEY.sign(b"before"))
    assert fact_message(prev, VALUE) != fact_message(GENESIS, VALUE)
    with pytest.raises(ValueError):
        fact_message("abc", VALUE)
    with pytest.raises(ValueError):
        fact_message(GENESIS.upper().replace("0", "A"), VALUE)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=64), st.binary(max_size=64),
       st.binary(max_size=64))
def test_fact_digest_never_confuses_two_splits(v1: bytes, s1: bytes, v2: bytes, s2: bytes) -> None:
    if (v1, s1) != (v2, s2):
        assert fact_digest(v1, s1) != fact_digest(v2, s2)
    assert len(fact_digest(v1, s1)) == 64 and fact_digest(v1, s1) != GENESIS


def test_digest_moves_a_byte_from_value_to_signature() -> None:
    assert fact_digest(b"ab", b"c") != fact_digest(b"a", b"bc")


def test_fact_headers_carry_signature_key_prev_keys_head_and_a_copied_request() -> None:
    request = sign_request(OTHER, VALUE)
    head = key_digest(b"k", b"s")
    headers = sign_fact(KEY, GENESIS, VALUE, request=request, keys_head=head)
    names = [name for name, _ in headers]
    assert names == [SIG_HEADER, KEY_HEADER, PREV_HEADER, KEYS_HEAD_HEADER, REQUEST_SIG_HEADER,
                     REQUEST_KEY_HEADER]
    found = signature_of(headers)
    assert isinstance(found, tuple) and found[0] == KEY.key_id
    assert KEY.public.verify(fact_message(GENESIS, VALUE, head), found[1])
    assert prev_of(headers) == GENESIS and prev_of(headers, KEYS_HEAD_HEADER) == head
    assert KEYS_HEAD_HEADER not in [n for n, _ in sign_fact(KEY, GENESIS, VALUE)]  # v1
    carried = signature_of(headers, REQUEST_SIG_HEADER, REQUEST_KEY_HEADER)
    assert isinstance(carried, tuple) and carried[0] == OTHER.key_id
    assert OTHER.public.verify(request_message(VALUE), carried[1])


def test_command_key_record_and_report_headers() -> None:
    for sign, message in ((sign_command, command_message), (sign_report, report_message)):
        found = signature_of(sign(KEY, VALUE))
        assert isinstance(found, tuple) and found[0] == KEY.key_id
        assert KEY.public.verify(message(VALUE), found[1])
    prev = key_digest(b"before", b"sig")
    headers = sign_key_record(KEY, prev, VALUE)
    found = signature_of(headers)
    assert isinstance(found, tuple) and found[0] == KEY.key_id
    assert KEY.public.verify(key_message(prev, VALUE), found[1])
    assert prev_of(headers) == prev


def test_missing_doubled_or_garbled_headers_read_as_no_signature() -> None:
    headers = sign_command(KEY, VALUE)
    assert signature_of(()) == f"no {SIG_HEADER} header"
    assert signature_of(headers[:1]) == f"no {KEY_HEADER} header"
    doubled = signature_of(headers + headers[:1])
    assert isinstance(doubled, str) and "more than once" in doubled
    assert isinstance(signature_of(((SIG_HEADER, b"s"), (KEY_HEADER, b"\xff"))), str)
    assert prev_of(()) is None
    assert prev_of(((PREV_HEADER, b"xyz"),)) is None
    assert prev_of(((PREV_HEADER, GENESIS.encode()),) * 2) is None
    assert prev_of(((PREV_HEADER, b"\xff" * 64),)) is None

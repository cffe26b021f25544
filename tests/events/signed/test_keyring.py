"""signed/keyring.py (with events/principals.py): the key ring fold and the signature judge."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.errors import InvalidEvent
from events.model import Event, PrincipalKeyRegistered, PrincipalKeyRevoked, principal_key
from events.signed.keyring import (
    ALREADY_REVOKED,
    BAD_SIGNATURE,
    DUPLICATE_KEY,
    EMPTY,
    KEY_ID_MISMATCH,
    LAST_ADMIN,
    NO_SUCH_KEY,
    NOT_A_KEY_RECORD,
    NOT_ADMIN,
    NOT_SELF_SIGNED,
    REVOKED_KEY,
    UNCHAINED,
    UNKNOWN_KEY,
    UNSIGNED,
    WRONG_PRINCIPAL,
    WRONG_RECORD_KEY,
    WRONG_ROLE,
    KeyRing,
    Refusal,
    apply,
    broken_link,
    check,
    check_headers,
)
from events.signed.signing import (
    GENESIS,
    REQUEST_KEY_HEADER,
    REQUEST_SIG_HEADER,
    SigningKey,
    command_message,
    key_message,
    request_message,
    sign_command,
    sign_fact,
    sign_request,
)
from tests.events.builders import Ev
from tests.events.signed_log import CAST, CODEC, START

ADMIN2 = SigningKey.generate()


def fold(*steps: tuple[Event, SigningKey | None]) -> KeyRing | Refusal:
    """Fold key records signed by the given keys; the first refusal stops the fold."""
    ring: KeyRing | Refusal = EMPTY
    for event, signer in steps:
        assert isinstance(ring, KeyRing), f"refused before {event.event_type}: {ring}"
        value = CODEC.encode(event)
        sig = signer.sign(key_message(ring.head, value)) if signer else None
        ring = apply(ring, event, signer.key_id if signer else None, sig, value, ring.head)
    return ring


EV = Ev("keys", start=START - 10_000, producer="admin/root")


def reg(principal: str, role: str, key: SigningKey, **kw: object) -> PrincipalKeyRegistered:
    return EV.key_registered(principal, role, key.public.raw, **kw)


def rev(principal: str, key: SigningKey, **kw: object) -> PrincipalKeyRevoked:
    return EV.key_revoked(principal, key.key_id, **kw)


ANCHOR = (reg("root", "admin", CAST.admin), CAST.admin)


def ring_of(*steps: tuple[Event, SigningKey | None]) -> KeyRing:
    ring = fold(ANCHOR, *steps)
    assert isinstance(ring, KeyRing), str(ring)
    return ring


def refused(ring: KeyRing | Refusal, reason: str) -> None:
    assert isinstance(ring, Refusal), f"accepted, expected {reason}"
    assert ring.reason == reason and ring.detail, str(ring)


# --- the events -------------------------------------------------------------------------


def test_key_records_validate_their_fields() -> None:
    good = reg("alice", "operator", CAST.alice)
    assert good.run_id == principal_key("alice") == "key/alice"
    assert good.key_id == CAST.alice.key_id
    for bad in (dict(principal="../etc"), dict(principal=""), dict(role="root"),
                dict(key_id="ABCDEF0123456789"), dict(key_id="abc"),
                dict(public_key=b"\x01" * 31), dict(public_key="x" * 32)):
        with pytest.raises(InvalidEvent):
            replace(good, **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent):
        replace(rev("alice", CAST.alice), key_id="xyz")


# --- the fold -----------------------------------------------------------------------------


def test_the_first_record_is_a_self_signed_admin_the_anchor() -> None:
    ring = ring_of((reg("controller", "controller", CAST.controller), CAST.admin))
    assert ring.anchor == CAST.admin.key_id
    assert sorted(ring.keys) == sorted([CAST.admin.key_id, CAST.controller.key_id])
    entry = ring.keys[CAST.controller.key_id]
    assert (entry.principal, entry.role, entry.registered_by) == (
        "controller", "controller", CAST.admin.key_id)
    assert entry.public == CAST.controller.public and entry.revoked_at is None


@pytest.mark.parametrize(("first", "signer", "reason"), [
    (reg("alice", "operator", CAST.alice), CAST.alice, NOT_ADMIN),
    (reg("root", "admin", CAST.admin), ADMIN2, NOT_SELF_SIGNED),
    (reg("root", "admin", CAST.admin), None, UNSIGNED),
    (rev("root", CAST.admin), CAST.admin, NO_SUCH_KEY),
])
def test_an_anchor_must_be_an_admin_signing_its_own_registration(
        first: Event, signer: SigningKey | None, reason: str) -> None:
    refused(fold((first, signer)), reason)


def test_a_forged_anchor_signature_is_refused() -> None:
    event = reg("root", "admin", CAST.admin)
    value = CODEC.encode(event)
    forged = ADMIN2.sign(key_message(GENESIS, value))
    refused(apply(EMPTY, event, CAST.admin.key_id, forged, value, GENESIS), BAD_SIGNATURE)


@pytest.mark.parametrize(("step", "reason"), [
    ((reg("alice", "operator", CAST.alice), CAST.controller), NOT_ADMIN),
    ((reg("alice", "operator", CAST.alice), CAST.stranger), UNKNOWN_KEY),
    ((reg("alice", "operator", CAST.alice), CAST.alice), UNKNOWN_KEY),  # self-signed later
    ((reg("alice", "operator", CAST.alice), None), UNSIGNED),
    ((reg("controller", "admin", CAST.controller), CAST.admin), DUPLICATE_KEY),
    ((reg("root", "admin", CAST.admin), CAST.admin), DUPLICATE_KEY),
    ((reg("alice", "operator", CAST.alice, key_id=CAST.bob.key_id), CAST.admin),
     KEY_ID_MISMATCH),
    ((reg("alice", "operator", CAST.alice, run_id="key/bob"), CAST.admin), WRONG_RECORD_KEY),
    ((rev("bob", CAST.controller), CAST.admin), WRONG_PRINCIPAL),
    ((rev("alice", CAST.alice), CAST.admin), NO_SUCH_KEY),
    ((rev("root", CAST.admin), CAST.admin), LAST_ADMIN),
    ((rev("controller", CAST.controller), CAST.controller), NOT_ADMIN),
    ((Ev("r1").submitted(), CAST.admin), NOT_A_KEY_RECORD),
])
def test_refusals_are_named(step: tuple[Event, SigningKey | None], reason: str) -> None:
    ring = ring_of((reg("controller", "controller", CAST.controller), CAST.admin))
    before = dict(ring.keys)
    refused(_after(ring, *step), reason)
    assert dict(ring.keys) == before  # copy-on-write: the ring is untouched


def _after(ring: KeyRing, event: Event, signer: SigningKey | None) -> KeyRing | Refusal:
    value = CODEC.encode(event)
    sig = signer.sign(key_message(ring.head, value)) if signer else None
    return apply(ring, event, signer.key_id if signer else None, sig, value, ring.head)


def test_a_signature_over_other_bytes_is_refused() -> None:
    ring = ring_of()
    event = reg("alice", "operator", CAST.alice)
    value = CODEC.encode(event)
    sig = CAST.admin.sign(command_message(value))  # signed for another use
    refused(apply(ring, event, CAST.admin.key_id, sig, value, ring.head), BAD_SIGNATURE)


def test_each_record_is_chained_to_the_one_before_and_signed_with_it() -> None:
    ring = ring_of()
    assert ring.records == 1 and ring.head != GENESIS and set(ring.heads) == {ring.head}
    event = reg("alice", "operator", CAST.alice)
    value = CODEC.encode(event)
    # Signed over another prev than the one it names: the signature does not hold.
    sig = CAST.admin.sign(key_message(GENESIS, value))
    refused(apply(ring, event, CAST.admin.key_id, sig, value, ring.head), BAD_SIGNATURE)
    # No prev at all: a keys log from before key records were chained.
    old = apply(ring, event, CAST.admin.key_id, sig, value, None)
    refused(old, UNCHAINED)
    assert isinstance(old, Refusal) and "make a new stack" in old.detail
    # Signed over the prev it names, but not the ring's head: taken, the break named apart.
    assert broken_link(ring, GENESIS) is not None and "removed" in str(broken_link(ring, GENESIS))
    assert broken_link(ring, ring.head) is None
    after = apply(ring, event, CAST.admin.key_id, sig, value, GENESIS)
    assert isinstance(after, KeyRing) and after.records == 2
    assert after.head not in (ring.head, GENESIS)
    assert set(after.heads) == set(ring.heads) | {after.head}


def test_revocation_is_ordered_in_the_keys_log() -> None:
    ring = ring_of((reg("ops", "admin", ADMIN2), CAST.admin),
                   (rev("root", CAST.admin), ADMIN2))
    entry = ring.keys[CAST.admin.key_id]
    assert entry.revoked_by == ADMIN2.key_id and entry.revoked_at is not None
    assert ring.anchor == CAST.admin.key_id  # still the anchor: what it signed stays valid
    assert ring.live_admins() == [ADMIN2.key_id]
    refused(_after(ring, reg("alice", "operator", CAST.alice), CAST.admin), REVOKED_KEY)
    refused(_after(ring, rev("root", CAST.admin), ADMIN2), ALREADY_REVOKED)
    refused(_after(ring, rev("ops", ADMIN2), ADMIN2), LAST_ADMIN)
    after = _after(ring, reg("alice", "operator", CAST.alice), ADMIN2)
    assert isinstance(after, KeyRing) and CAST.alice.key_id in after.keys
    refused(_after(ring, reg("root", "admin", CAST.admin), ADMIN2), DUPLICATE_KEY)


# --- the judge ------------------------------------------------------------------------------


def _ring_with_revoked_alice(revoked_at: int) -> KeyRing:
    return ring_of((reg("alice", "operator", CAST.alice), CAST.admin),
                   (reg("controller", "controller", CAST.controller), CAST.admin),
                   (rev("alice", CAST.alice, at=revoked_at), CAST.admin))


def test_check_names_every_reason() -> None:
    ring = ring_of((reg("alice", "operator", CAST.alice), CAST.admin))
    msg = request_message(b"value")
    sig = CAST.alice.sign(msg)

    def judge(**kw: object) -> str | None:
        args: dict[str, object] = dict(principal="alice", key_id=CAST.alice.key_id,
                                       message=msg, signature=sig, role="operator")
        return check(ring, **{**args, **kw})  # type: ignore[arg-type]

    assert judge() is None
    assert judge(principal=None, role=None) is None
    assert judge(signature=None) == UNSIGNED
    assert judge(signature=b"") == UNSIGNED
    assert judge(key_id=None) == UNSIGNED
    assert judge(key_id=CAST.stranger.key_id) == UNKNOWN_KEY
    assert judge(message=command_message(b"value")) == BAD_SIGNATURE
    assert judge(signature=bytes(64)) == BAD_SIGNATURE
    assert judge(principal="bob") == WRONG_PRINCIPAL
    assert judge(role="admin") == WRONG_ROLE


def test_a_revoked_key_verifies_what_it_signed_before_the_revocation_only() -> None:
    t = START + 5_000
    ring = _ring_with_revoked_alice(t)
    msg = request_message(b"value")
    sig = CAST.alice.sign(msg)

    def at(when: int | None) -> str | None:
        return check(ring, principal="alice", key_id=CAST.alice.key_id, message=msg,
                     signature=sig, role="operator", at=when)

    assert at(t - 1) is None
    assert at(t) == REVOKED_KEY
    assert at(t + 1) == REVOKED_KEY
    assert at(None) == REVOKED_KEY  # a live verifier: revoked is revoked


def test_check_headers_reads_the_signature_headers() -> None:
    ring = ring_of((reg("alice", "operator", CAST.alice), CAST.admin),
                   (reg("controller", "controller", CAST.controller), CAST.admin))
    value = b"\xc3\x01 a request"
    headers = sign_request(CAST.alice, value)
    assert check_headers(ring, headers, request_message(value), principal="alice",
                         role="operator") is None
    assert check_headers(ring, headers + headers, request_message(value), principal="alice",
                         role="operator") == UNSIGNED
    command = sign_command(CAST.controller, value)
    assert check_headers(ring, command, command_message(value), principal=None,
                         role="controller") is None
    fact = sign_fact(CAST.controller, "0" * 64, value, request=headers)
    assert check_headers(ring, fact, request_message(value), principal="alice", role="operator",
                         names=(REQUEST_SIG_HEADER, REQUEST_KEY_HEADER)) is None
    assert check_headers(ring, (), request_message(value), principal="alice",
                         role="operator") == UNSIGNED

"""``runledger key create|register|revoke|list``: the principals' signing keys, on any cluster.

``create`` needs no broker: it writes a new Ed25519 key file (mode 0600, never
overwritten) and prints the key id and the public key, never the private one.
``register`` and ``revoke`` write a key record to ``runledger.keys`` signed by
an admin key (``--admin-key``), with the admin's Kafka credentials
(``RUNLEDGER_CREDENTIALS``; nobody else may write that topic); a record the
key ring would refuse is reported in one line and not written
(:mod:`runledger.keylog`). ``list`` prints the ring folded from the log.

Tested in tests/runledger/commands/test_keys.py.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from events.names import name_problem
from events.signed.keyring import KeyEntry, KeyRing
from events.signed.signing import PublicKey, SigningKey, is_key_id
from runledger import config, keylog
from runledger.config import AsJson, Bootstrap
from runledger.errors import UsageError
from runledger.signer import load_key

PrincipalArg = Annotated[str, typer.Argument(metavar="PRINCIPAL", help="Whose key.")]
Out = Annotated[Path | None, typer.Option(
    "--out", help="The key file to write (default ./PRINCIPAL.key; never overwritten).")]
RoleOption = Annotated[str, typer.Option(
    "--role", help="operator, agent, worker, controller, projector or admin.")]
PublicHex = Annotated[str | None, typer.Option(
    "--public", metavar="HEX", help="The public key, 64 hex characters (`key create` prints it).")]
KeyFile = Annotated[Path | None, typer.Option(
    "--key", metavar="FILE", help="A key file whose public key to register.")]
AdminKey = Annotated[Path, typer.Option(
    "--admin-key", metavar="FILE", help="The admin key file that signs the key record.")]
Reason = Annotated[str | None, typer.Option("--reason", help="Why; recorded with the record.")]
KeyIdArg = Annotated[str, typer.Argument(metavar="KEY_ID", help="The key id (16 hex).")]


def register(app: typer.Typer) -> None:
    key_app = typer.Typer(help="Signing keys: create, register, revoke, list (runledger.keys).",
                          no_args_is_help=True)
    key_app.command("create")(create)
    key_app.command("register")(register_key)
    key_app.command("revoke")(revoke)
    key_app.command("list")(list_keys)
    app.add_typer(key_app, name="key")


def create(principal: PrincipalArg, out: Out = None, as_json: AsJson = False) -> None:
    """Write a new key file (mode 0600) and print its key id and public key (hex)."""
    _check_principal(principal)
    target = out or Path(f"{principal}.key")
    if target.exists() or target.is_symlink():
        raise UsageError(f"{target} already exists; choose another --out or move it away")
    key = SigningKey.generate()
    try:
        key.save(target)
    except OSError as exc:
        raise UsageError(f"cannot write {target} ({exc.strerror}); choose another --out") \
            from None
    public = key.public.raw.hex()
    if as_json:
        typer.echo(json.dumps({"principal": principal, "key_id": key.key_id, "public": public,
                               "file": str(target)}))
    else:
        typer.echo(f"{key.key_id} {public}")
    typer.echo(f"key {key.key_id} of {principal} in {target} (keep it private); register it "
               f"with: runledger key register {principal} --role ROLE --public {public} "
               "--admin-key ADMIN.key", err=True)


def register_key(principal: PrincipalArg, role: RoleOption, admin_key: AdminKey,
                 public: PublicHex = None, key: KeyFile = None, reason: Reason = None,
                 as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Register a public key as PRINCIPAL's for ROLE, signed by the admin key.

    Needs the admin's Kafka credentials. The first key of an empty keys log
    must be an admin key registered with itself as --admin-key: the trust anchor.
    """
    _check_principal(principal)
    keylog.check_role(role)
    registered = _public_key(public, key)
    admin = load_key(admin_key, "--admin-key")
    address = config.connect(bootstrap)
    ring = keylog.load_ring(address, patience_s=config.retry_s()).ring
    event = keylog.registration(principal, role, registered, now_ms=_now_ms(),
                                by=f"cli/{principal_of(admin, ring)}",
                                reason=reason or "runledger key register")
    written = keylog.append(address, ring, event, admin)
    anchor = " (the trust anchor)" if written.ring.anchor == registered.key_id else ""
    if as_json:
        typer.echo(json.dumps({"registered": registered.key_id, "principal": principal,
                               "role": role, "anchor": written.ring.anchor == registered.key_id,
                               "at": written.where}))
        return
    typer.echo(f"registered key {registered.key_id} of {principal} ({role}){anchor} at "
               f"{written.where}")


def revoke(principal: PrincipalArg, key_id: KeyIdArg, admin_key: AdminKey,
           reason: Reason = None, as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Revoke PRINCIPAL's key KEY_ID: from now on it verifies nothing it signs."""
    _check_principal(principal)
    if not is_key_id(key_id):
        raise UsageError(f"KEY_ID {key_id!r:.40} is not a key id (16 lowercase hex characters; "
                         "`runledger key list` shows them)")
    admin = load_key(admin_key, "--admin-key")
    address = config.connect(bootstrap)
    ring = keylog.load_ring(address, patience_s=config.retry_s()).ring
    event = keylog.revocation(principal, key_id, now_ms=_now_ms(),
                              by=f"cli/{principal_of(admin, ring)}",
                              reason=reason or "runledger key revoke")
    written = keylog.append(address, ring, event, admin)
    if as_json:
        typer.echo(json.dumps({"revoked": key_id, "principal": principal, "at": written.where}))
        return
    typer.echo(f"revoked key {key_id} of {principal} at {written.where}")


def list_keys(as_json: AsJson = False, bootstrap: Bootstrap = None) -> None:
    """Every key folded from runledger.keys: principal, role, key id, registered, revoked."""
    address = config.connect(bootstrap)
    found = keylog.load_ring(address, patience_s=config.retry_s())
    entries = sorted(found.ring.keys.values(),
                     key=lambda e: (e.principal, e.registered_at, e.key_id))
    for problem in found.problems:
        typer.echo(f"runledger: warning: refused key record {problem}", err=True)
    if as_json:
        typer.echo(json.dumps({"anchor": found.ring.anchor, "records": found.records,
                               "refused": len(found.problems),
                               "keys": [_entry_doc(e, found.ring.anchor) for e in entries]},
                              indent=2))
        return
    typer.echo(f"{'principal':<20} {'role':<10} {'key id':<16}  {'registered':<20}  revoked")
    for e in entries:
        mark = " (anchor)" if e.key_id == found.ring.anchor else ""
        revoked = _iso(e.revoked_at) if e.revoked_at is not None else "-"
        typer.echo(f"{e.principal:<20} {e.role:<10} {e.key_id:<16}  {_iso(e.registered_at):<20}"
                   f"  {revoked}{mark}")
    if not entries:
        typer.echo("no keys registered: the keys log holds no trust anchor yet", err=True)


def principal_of(key: SigningKey, ring: KeyRing) -> str:
    """Whom a key is registered to, for a record's producer; its id when nobody yet."""
    entry = ring.get(key.key_id)
    return entry.principal if entry is not None else key.key_id


def _entry_doc(e: KeyEntry, anchor: str | None) -> dict[str, Any]:
    return {"principal": e.principal, "role": e.role, "key_id": e.key_id,
            "public": e.public.raw.hex(), "anchor": e.key_id == anchor,
            "registered_at": e.registered_at, "registered_by": e.registered_by,
            "revoked_at": e.revoked_at, "revoked_by": e.revoked_by}


def _public_key(public: str | None, key: Path | None) -> PublicKey:
    if (public is None) == (key is None):
        raise UsageError("give the key to register once: --public HEX or --key FILE")
    if key is not None:
        return load_key(key, "--key").public
    assert public is not None
    try:
        return PublicKey(bytes.fromhex(public.strip()))
    except ValueError:
        raise UsageError(f"--public {public!r:.80} is not an Ed25519 public key (64 hex "
                         "characters, as `runledger key create` prints)") from None


def _check_principal(principal: str) -> None:
    problem = name_problem(principal, "principal")
    if problem is not None:
        raise UsageError(problem)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

"""``runledger key create|register|revoke|list`` as a user runs them, on the session broker.

``create`` needs no broker and prints the public half only. ``register`` and
``revoke`` sign with the stack's admin key (``<data dir>/keys/admin.key``) and
write as the admin principal; every refusal (the key fold's: a key registered
twice, an operator key posing as an admin's, the last admin key revoked; the
broker's: an operator's credentials) is one line and leaves the keys log as it
was. The anchor rules of an empty keys log are checked on a fresh topic
through :mod:`runledger.keylog`.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from events.kafka.connection import ENV_CREDENTIALS
from events.model import PrincipalKeyRegistered, principal_key
from events.signed.keyring import NOT_ADMIN, NOT_SELF_SIGNED
from events.signed.signing import SigningKey
from events.topics import KEYS
from runledger import keylog
from runledger.rawlog import read_raw
from tests.runledger.signed_topics import create_topics


def cli(*args: str, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})}, cwd=cwd,
                          check=False)


def one_line_error(out: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert out.returncode == code, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("runledger: ") and needle in line, line


def stack_dir() -> Path:
    """The session stack's data dir: its admin credentials file lies in <dir>/credentials/."""
    return Path(os.environ[ENV_CREDENTIALS]).parent.parent


def admin_key() -> str:
    return str(stack_dir() / "keys" / "admin.key")


def keys_log(bootstrap: str, *principals: str) -> int:
    """The records on the keys log of ``principals`` (keyed by each): tests share the
    broker, and another test's registration must not count as this one's write."""
    keys = {principal_key(p).encode() for p in principals}
    return sum(r.key in keys for r in read_raw(bootstrap, [KEYS], patience_s=20)[KEYS])


def name() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def test_create_writes_a_private_key_file_and_prints_only_the_public_half(
        tmp_path: Path) -> None:
    out = cli("key", "create", "alice", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    key = SigningKey.load(tmp_path / "alice.key")
    assert out.stdout.split() == [key.key_id, key.public.raw.hex()]
    assert stat.S_IMODE((tmp_path / "alice.key").stat().st_mode) == 0o600
    body = "".join((tmp_path / "alice.key").read_text().splitlines()[1:-1])
    assert body not in out.stdout + out.stderr
    assert "runledger key register alice --role ROLE --public" in out.stderr

    again = cli("key", "create", "alice", cwd=tmp_path)
    one_line_error(again, 2, "alice.key already exists")
    assert SigningKey.load(tmp_path / "alice.key").key_id == key.key_id  # never overwritten
    doc = json.loads(cli("key", "create", "bob", "--out", str(tmp_path / "b.key"),
                         "--json").stdout)
    assert doc["key_id"] == SigningKey.load(tmp_path / "b.key").key_id
    assert doc["principal"] == "bob" and len(doc["public"]) == 64
    one_line_error(cli("key", "create", "bad name", "--out", str(tmp_path / "x")), 2,
                   "principal")


@pytest.mark.kafka
def test_register_list_and_revoke_a_key(bootstrap: str, tmp_path: Path) -> None:
    who, other = name(), name()
    made = json.loads(cli("key", "create", who, "--out", str(tmp_path / "k"), "--json").stdout)
    out = cli("key", "register", who, "--role", "operator", "--public", made["public"],
              "--admin-key", admin_key(), "--reason", "onboarding")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"registered key {made['key_id']} of {who} (operator) at "
                                 f"{KEYS}[0]@")
    cli("key", "create", other, "--out", str(tmp_path / "o"))
    out = cli("key", "register", other, "--role", "agent", "--key", str(tmp_path / "o"),
              "--admin-key", admin_key(), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["principal"], doc["role"], doc["anchor"]) == (other, "agent", False)
    assert doc["at"].startswith(f"{KEYS}[0]@")

    listed = json.loads(cli("key", "list", "--json").stdout)
    mine = {k["principal"]: k for k in listed["keys"] if k["principal"] in (who, other)}
    admin = SigningKey.load(admin_key()).key_id
    assert listed["anchor"] == admin and listed["refused"] == 0
    assert (mine[who]["role"], mine[who]["key_id"], mine[who]["registered_by"],
            mine[who]["revoked_at"]) == ("operator", made["key_id"], admin, None)
    assert mine[other]["role"] == "agent"
    table = cli("key", "list").stdout
    assert any(line.split()[:3] == [who, "operator", made["key_id"]]
               for line in table.splitlines())

    before = time.time() * 1000
    out = cli("key", "revoke", who, made["key_id"], "--admin-key", admin_key())
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"revoked key {made['key_id']} of {who} at {KEYS}[0]@")
    listed = json.loads(cli("key", "list", "--json").stdout)
    [entry] = [k for k in listed["keys"] if k["key_id"] == made["key_id"]]
    assert entry["revoked_at"] >= before - 60_000 and entry["revoked_by"] == admin
    gone = json.loads(cli("key", "revoke", other, doc["registered"], "--admin-key", admin_key(),
                          "--json").stdout)
    assert (gone["revoked"], gone["principal"]) == (doc["registered"], other)

    count = keys_log(bootstrap, who, other)
    assert count >= 3  # two registrations and a revocation: the filter sees them
    one_line_error(cli("key", "revoke", who, made["key_id"], "--admin-key", admin_key()), 1,
                   "already_revoked")
    one_line_error(cli("key", "register", who, "--role", "operator", "--public",
                       made["public"], "--admin-key", admin_key()), 1, "duplicate_key")
    one_line_error(cli("key", "revoke", other, made["key_id"], "--admin-key", admin_key()), 1,
                   "wrong_principal")
    assert keys_log(bootstrap, who, other) == count


@pytest.mark.kafka
def test_every_refusal_is_one_line_and_writes_nothing(bootstrap: str, tmp_path: Path) -> None:
    keys = stack_dir() / "keys"
    admin = SigningKey.load(admin_key())
    listed = json.loads(cli("key", "list", "--json").stdout)
    live_admins = [k for k in listed["keys"] if k["role"] == "admin" and not k["revoked_at"]]
    cli("key", "create", "x", "--out", str(tmp_path / "x.key"))
    public = SigningKey.load(tmp_path / "x.key").public.raw.hex()
    register = ("key", "register", name(), "--role", "operator")
    count = keys_log(bootstrap, register[2], "y", "admin")
    one_line_error(cli(*register, "--public", public, "--admin-key", str(keys / "operator.key")),
                   1, "not_admin")
    one_line_error(cli(*register, "--public", public, "--admin-key", str(tmp_path / "x.key")),
                   1, "unknown_key")
    if [k["key_id"] for k in live_admins] == [admin.key_id]:
        one_line_error(cli("key", "revoke", "admin", admin.key_id, "--admin-key", admin_key()),
                       1, "last_admin")
    operator = {ENV_CREDENTIALS: str(stack_dir() / "credentials" / "operator.properties")}
    one_line_error(cli(*register, "--public", public, "--admin-key", admin_key(), env=operator),
                   1, f"may not write {KEYS}")
    one_line_error(cli(*register, "--public", "abcd", "--admin-key", admin_key()), 2,
                   "--public 'abcd' is not an Ed25519 public key")
    one_line_error(cli(*register, "--public", public, "--key", str(tmp_path / "x.key"),
                       "--admin-key", admin_key()), 2, "--public HEX or --key FILE")
    one_line_error(cli("key", "register", "y", "--role", "boss", "--public", public,
                       "--admin-key", admin_key()), 2, "--role 'boss' is not a key role")
    one_line_error(cli(*register, "--public", public, "--admin-key", str(tmp_path / "none")),
                   2, "no such file")
    one_line_error(cli("key", "revoke", "admin", "XYZ", "--admin-key", admin_key()), 2,
                   "is not a key id")
    assert keys_log(bootstrap, register[2], "y", "admin") == count


@pytest.mark.kafka
def test_an_empty_keys_log_takes_a_self_signed_admin_key_first(
        bootstrap: str, unique: str) -> None:
    topic = f"test.{unique}.keys"
    create_topics(bootstrap, {topic: 1})
    root, alice = SigningKey.generate(), SigningKey.generate()
    empty = keylog.load_ring(bootstrap, topic=topic).ring
    assert empty.anchor is None

    def reg(principal: str, role: str, key: SigningKey) -> PrincipalKeyRegistered:
        return keylog.registration(principal, role, key.public, now_ms=1, by="test", reason="t")

    with pytest.raises(keylog.KeyRefused, match=NOT_ADMIN):
        keylog.append(bootstrap, empty, reg("alice", "operator", alice), root, topic=topic)
    with pytest.raises(keylog.KeyRefused, match=NOT_SELF_SIGNED):
        keylog.append(bootstrap, empty, reg("root", "admin", root), alice, topic=topic)
    first = keylog.append(bootstrap, empty, reg("root", "admin", root), root, topic=topic)
    assert first.where == f"{topic}[0]@0" and first.ring.anchor == root.key_id
    second = keylog.append(bootstrap, first.ring, reg("alice", "operator", alice), root,
                           topic=topic)
    assert second.where == f"{topic}[0]@1"
    again = keylog.load_ring(bootstrap, topic=topic)
    assert (again.records, again.problems, again.ring) == (2, (), second.ring)


@pytest.mark.kafka
def test_writers_on_one_machine_take_turns_and_never_break_the_chain(
        bootstrap: str, unique: str) -> None:
    """Agents enrolling themselves and an admin registering keys at once, each from a
    ring it read before the others wrote: every record chains to the one before it."""
    topic = f"test.{unique}.keys"
    create_topics(bootstrap, {topic: 1})
    root = SigningKey.generate()
    empty = keylog.load_ring(bootstrap, topic=topic).ring
    first = keylog.append(bootstrap, empty, keylog.registration(
        "root", "admin", root.public, now_ms=1, by="test", reason="t"), root, topic=topic)
    stale = first.ring  # every writer below starts from this head
    errors: list[BaseException] = []

    def register(i: int) -> None:
        key = SigningKey.generate()
        try:
            keylog.append(bootstrap, stale, keylog.registration(
                f"node.n{i}", "agent", key.public, now_ms=2, by="test", reason="t"),
                root, topic=topic)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    ring = keylog.load_ring(bootstrap, topic=topic)
    assert (ring.records, ring.problems) == (7, ())
    assert {e.principal for e in ring.ring.keys.values() if e.role == "agent"} == {
        f"node.n{i}" for i in range(6)}

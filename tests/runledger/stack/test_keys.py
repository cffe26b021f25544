"""A secure stack's signing keys (``runledger.stack.keys``): made once, registered once.

The session's stack (``make test`` starts it with ``stack up``) has its key
files in ``<data dir>/keys`` (0700, each 0600) and its keys log starts with
the admin's self-signed anchor, then the controller's and the operator's keys
signed by it; ``stack up`` again registers nothing twice. The ``slow`` test
owns a private stack to replace and revoke its keys: a new key file is
registered beside the old one, a revoked key or a foreign admin key stops
``up`` with one line.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from events.codec import default_codec
from events.kafka.connection import ENV_CREDENTIALS
from events.model import PrincipalKeyRegistered
from events.signed.signing import SigningKey, signature_of
from events.topics import KEYS
from runledger.rawlog import read_raw
from runledger.stack.keys import SIGNERS
from tests.stacks import private_stack

CODEC = default_codec()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], capture_output=True,
                          text=True, timeout=240, env={**os.environ, **(env or {})},
                          check=False)


def registrations(bootstrap: str) -> list[tuple[PrincipalKeyRegistered, str]]:
    """Every registration on the keys log with the key id that signed it, in log order."""
    out = []
    for record in read_raw(bootstrap, [KEYS], patience_s=20)[KEYS]:
        event = CODEC.decode(record.value).event
        found = signature_of(record.headers)
        if isinstance(event, PrincipalKeyRegistered) and isinstance(found, tuple):
            out.append((event, found[0]))
    return out


def keys_of(data_dir: Path) -> dict[str, SigningKey]:
    return {p: SigningKey.load(data_dir / "keys" / f"{p}.key") for p in SIGNERS}


@pytest.mark.kafka
def test_the_session_stack_holds_private_keys_registered_once(bootstrap: str) -> None:
    data_dir = Path(os.environ[ENV_CREDENTIALS]).parent.parent
    folder = data_dir / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    # an agent on this stack enrolls itself (node.<name>.key, tests.runledger.commands
    # .test_enroll); the stack's own keys are the three signers
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("node.")) == [
        "admin.key", "controller.key", "operator.key"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())
    keys = keys_of(data_dir)
    first = registrations(bootstrap)[:3]
    assert [(e.principal, e.role, e.key_id, signer) for e, signer in first] == [
        ("admin", "admin", keys["admin"].key_id, keys["admin"].key_id),  # self-signed: the anchor
        ("controller", "controller", keys["controller"].key_id, keys["admin"].key_id),
        ("operator", "operator", keys["operator"].key_id, keys["admin"].key_id),
    ]
    out = cli("stack", "up", "--data-dir", str(data_dir), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["keys"] == str(folder)
    counts = Counter(e.key_id for e, _ in registrations(bootstrap))
    assert [counts[k.key_id] for k in keys.values()] == [1, 1, 1]
    assert {p: k.key_id for p, k in keys_of(data_dir).items()} == {
        p: k.key_id for p, k in keys.items()}  # the files are kept


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_replaced_key_is_registered_and_a_revoked_or_foreign_one_stops_up(
        tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    stack = private_stack(data_dir)
    try:
        info = stack.up()
        assert info.keys == data_dir / "keys"
        env = {"RUNLEDGER_BOOTSTRAP": info.bootstrap, ENV_CREDENTIALS: str(info.credentials)}
        keys = keys_of(data_dir)
        assert [e.key_id for e, _ in registrations(info.bootstrap)] == [
            keys[p].key_id for p in SIGNERS]

        shutil.move(data_dir / "keys" / "operator.key", tmp_path / "old-operator.key")
        assert stack.up().keys == data_dir / "keys"
        fresh = keys_of(data_dir)["operator"]
        assert fresh.key_id != keys["operator"].key_id
        assert [e.key_id for e, _ in registrations(info.bootstrap)][3:] == [fresh.key_id]

        admin_key = str(data_dir / "keys" / "admin.key")
        out = cli("key", "revoke", "operator", fresh.key_id, "--admin-key", admin_key, env=env)
        assert out.returncode == 0, out.stderr
        again = cli("stack", "up", "--data-dir", str(data_dir), env=env)
        assert again.returncode == 1 and "Traceback" not in again.stderr
        [line] = again.stderr.strip().splitlines()
        assert f"holds key {fresh.key_id}, revoked on the keys log" in line, line

        (data_dir / "keys" / "operator.key").unlink()
        shutil.move(data_dir / "keys" / "admin.key", tmp_path / "old-admin.key")
        foreign = cli("stack", "up", "--data-dir", str(data_dir), env=env)
        assert foreign.returncode == 1 and "Traceback" not in foreign.stderr
        [line] = foreign.stderr.strip().splitlines()
        assert "is not a live admin key on the keys log" in line, line
        assert f"(its anchor is {keys['admin'].key_id})" in line
        assert len(registrations(info.bootstrap)) == 4  # nothing registered by the refusals
    finally:
        stack.down(purge=True)

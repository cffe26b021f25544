"""runledger/commands/controller.py: where the controller's signing key comes from.

No broker: every refusal here comes before the controller connects to one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.service import ENV_SIGNING_KEY
from events.signed.signing import SigningKey
from runledger.commands.controller import load_signing_key
from runledger.errors import UsageError


@pytest.fixture
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SIGNING_KEY, raising=False)


def saved(tmp_path: Path, name: str = "controller.key") -> tuple[SigningKey, Path]:
    key = SigningKey.generate()
    key.save(tmp_path / name)
    return key, tmp_path / name


def test_the_key_comes_from_the_option_else_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given, path = saved(tmp_path)
    from_env, env_path = saved(tmp_path, "env.key")
    monkeypatch.setenv(ENV_SIGNING_KEY, str(env_path))
    assert load_signing_key(path, False).key_id == given.key_id  # type: ignore[union-attr]
    assert load_signing_key(None, False).key_id == from_env.key_id  # type: ignore[union-attr]
    assert load_signing_key(None, True) is None  # --unsigned outranks the environment


@pytest.mark.usefixtures("no_env_key")
def test_without_a_key_the_controller_refuses_and_says_what_to_pass() -> None:
    with pytest.raises(UsageError) as refused:
        load_signing_key(None, False)
    text = str(refused.value)
    assert "--signing-key FILE" in text and ENV_SIGNING_KEY in text and "--unsigned" in text
    assert load_signing_key(None, True) is None


@pytest.mark.usefixtures("no_env_key")
def test_a_missing_unreadable_or_contradicted_key_is_one_line(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    not_pem = tmp_path / "garbage.key"
    not_pem.write_text("not a key\nat all\n")
    cases = {tmp_path / "absent.key": "no such file", not_pem: "not an unencrypted Ed25519"}
    for named, says in cases.items():
        with pytest.raises(UsageError) as refused:
            load_signing_key(named, False)
        assert says in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(UsageError, match="contradict"):
        load_signing_key(path, True)


def test_runledger_controller_without_a_key_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != ENV_SIGNING_KEY}
    env["RUNLEDGER_BOOTSTRAP"] = "127.0.0.1:1"  # never reached: the refusal comes first
    done = subprocess.run([sys.executable, "-m", "runledger.cli", "controller"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("runledger: no signing key"), done.stderr


def _controller(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV_SIGNING_KEY}
    env["RUNLEDGER_BOOTSTRAP"] = "127.0.0.1:1"  # never reached: the refusal comes first
    return subprocess.run([sys.executable, "-m", "runledger.cli", "controller", *args],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_require_signatures_still_parses_and_contradicts_trust_unsigned(tmp_path: Path) -> None:
    """Signed requests are the default; the old opt-in flag is accepted (a script that
    passes it goes on to the usual key check) and may not be combined with its opposite."""
    old = _controller(tmp_path, "--require-signatures")
    assert old.returncode == 2 and old.stderr.startswith("runledger: no signing key"), old.stderr
    both = _controller(tmp_path, "--unsigned", "--trust-unsigned", "--require-signatures")
    assert both.returncode == 2, both.stderr
    [line] = both.stderr.strip().splitlines()
    assert "--trust-unsigned and --require-signatures contradict" in line

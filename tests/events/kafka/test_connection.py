"""events.kafka.connection: the credentials file, the client configuration, the refusal lines."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from events.errors import CredentialsError
from events.kafka.connection import (
    ANONYMOUS,
    ENV_CREDENTIALS,
    client_config,
    parse_credentials,
    principal,
    refused,
    security_settings,
)

GOOD = """# alice's
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.username=alice
sasl.password=s3cret=with=equals
ssl.ca.location=/etc/ca.pem
"""


def private(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "creds.properties"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_file_gives_its_settings_and_the_password_keeps_its_equals_signs() -> None:
    settings = parse_credentials(GOOD, "f")
    assert settings["sasl.password"] == "s3cret=with=equals"
    assert settings["ssl.ca.location"] == "/etc/ca.pem"
    assert set(settings) == {"security.protocol", "sasl.mechanism", "sasl.username",
                             "sasl.password", "ssl.ca.location"}


@pytest.mark.parametrize("line", ["bootstrap.servers=evil:9092", "acks=0",
                                  "enable.idempotence=false", "group.id=x"])
def test_a_file_may_not_change_where_or_how_a_client_writes(line: str) -> None:
    with pytest.raises(CredentialsError, match=r"f:2: .* is not a connection setting"):
        parse_credentials(f"sasl.username=a\n{line}\n", "f")


def test_a_line_without_equals_is_named() -> None:
    with pytest.raises(CredentialsError, match="f:1: expected key=value"):
        parse_credentials("sasl.username\n", "f")


def test_credentials_come_last_so_no_setting_can_turn_them_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CREDENTIALS, str(private(tmp_path, GOOD)))
    conf = client_config("h:1", {"security.protocol": "PLAINTEXT", "acks": "all"})
    assert conf["security.protocol"] == "SASL_PLAINTEXT"
    assert conf["acks"] == "all" and conf["bootstrap.servers"] == "h:1"
    # An explicit "" is no credentials, whatever the environment says.
    assert "sasl.username" not in client_config("h:1", credentials="")


def test_no_variable_means_plaintext_and_the_anonymous_principal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CREDENTIALS, raising=False)
    assert security_settings() == {}
    assert principal() == ANONYMOUS


def test_a_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = private(tmp_path, GOOD, 0o644)
    with pytest.raises(CredentialsError, match=f"run `chmod 600 {path}`"):
        security_settings(path)


def test_a_missing_file_names_itself_and_the_variable(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=f"cannot read credentials file .*{ENV_CREDENTIALS}"):
        security_settings(tmp_path / "absent")


def test_a_refusal_names_the_principal_the_operation_and_the_resource(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CREDENTIALS, str(private(tmp_path, GOOD)))
    line = refused(KafkaError.TOPIC_AUTHORIZATION_FAILED, "write", "runledger.runs")
    assert line is not None
    assert line.startswith("principal 'alice' may not write topic runledger.runs: the broker")
    assert "s3cret" not in line
    group = refused(KafkaError.GROUP_AUTHORIZATION_FAILED, "read", "g1")
    assert group is not None and "may not read consumer group g1" in group
    login = refused(KafkaError.SASL_AUTHENTICATION_FAILED, "connect to", "h:1")
    assert login is not None and "did not accept the credentials of principal 'alice'" in login
    assert refused(KafkaError._TRANSPORT, "write", "t") is None


def test_without_credentials_the_hint_is_to_set_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CREDENTIALS, raising=False)
    line = refused(KafkaError.TOPIC_AUTHORIZATION_FAILED, "read", "t")
    assert line is not None and f"principal {ANONYMOUS!r}" in line
    assert "set RUNLEDGER_CREDENTIALS" in line


def test_librdkafka_messages_go_to_python_logging_not_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A producer aimed at a port nobody serves: librdkafka's connection errors
    arrive as records of ``runledger.kafka`` (served by poll), none on fd 2."""
    producer = Producer(client_config("127.0.0.1:1", {"socket.connection.setup.timeout.ms": 1000}))
    with caplog.at_level(logging.WARNING, logger="runledger.kafka"):
        deadline = time.monotonic() + 60  # generous: a loaded machine
        while time.monotonic() < deadline and not any(
                r.name == "runledger.kafka" for r in caplog.records):
            producer.poll(0.2)
    records = [r for r in caplog.records if r.name == "runledger.kafka"]
    assert records, "librdkafka logged nothing through Python logging"
    assert all(r.levelno >= logging.WARNING for r in records)
    assert any("127.0.0.1:1" in r.getMessage() for r in records)
    assert "127.0.0.1:1" not in capfd.readouterr().err

"""Finding and reaching the broker: the bootstrap address and whether one answers.

Tested in tests/events/kafka/test_clients.py.
"""

from __future__ import annotations

import os

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from events.errors import BrokerUnavailable, KafkaOperationError, NoBootstrapAddress, NotAuthorized
from events.kafka.connection import ENV_CREDENTIALS, client_config, refused, security_settings
from events.workerenv import ENV_BOOTSTRAP


def bootstrap_from_env(explicit: str | None = None) -> str:
    """The bootstrap address: an explicit one, else ``RUNLEDGER_BOOTSTRAP``."""
    value = explicit or os.environ.get(ENV_BOOTSTRAP, "")
    if not value:
        raise NoBootstrapAddress(
            f"no Kafka bootstrap address: pass --bootstrap, set {ENV_BOOTSTRAP}, or start"
            " `runledger stack up`"
        )
    return value


def check_broker(bootstrap: str, timeout_s: float = 5.0) -> int:
    """Number of brokers that answer; ``BrokerUnavailable`` when none does,
    ``NotAuthorized`` when one answers but refuses the credentials."""
    seen: list[KafkaError] = []  # librdkafka reports a failed login here, not in the call's error
    admin = AdminClient(client_config(
        bootstrap, {"socket.connection.setup.timeout.ms": 3000, "log_level": 0,
                    "error_cb": seen.append}))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.poll(0)  # serves the error callbacks queued meanwhile
        for err in [exc.args[0], *seen]:
            refusal = refused(err.code(), "connect to", bootstrap)
            if refusal is not None:
                raise NotAuthorized(refusal) from None
        tls = next((e for e in seen if e.code() == KafkaError._SSL), None)
        if tls is not None:  # no retry mends a certificate that cannot be verified
            raise KafkaOperationError(
                f"the TLS handshake with {bootstrap} failed ({tls.str()}); put the "
                "cluster's CA in the credentials file as ssl.ca.location (a local stack's "
                "is <data dir>/tls/ca.pem)") from None
        hint = ("" if security_settings() else
                f"; if the cluster requires authentication, set {ENV_CREDENTIALS}")
        raise BrokerUnavailable(f"no Kafka broker answered at {bootstrap}: "
                                f"{exc.args[0]}{hint}") from None
    return len(metadata.brokers)

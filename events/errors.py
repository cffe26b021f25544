"""The events package's exceptions: one root, a few specific leaves.

Tested in tests/events/test_codec.py, tests/events/kafka/test_clients.py and
tests/events/kafka/test_reader.py.
"""

from __future__ import annotations


class EventsError(Exception):
    """Root of every error raised by the ``events`` package."""


class SchemaError(EventsError):
    """A schema file is missing, malformed, or does not match its event class."""


class DecodeError(EventsError):
    """Bytes that are not a decodable runledger event.

    ``reason`` is a short machine-readable code (``bad_magic``, ``truncated``,
    ``unknown_fingerprint``, ``body_invalid``, ``not_an_event``, ...).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EncodeError(EventsError):
    """An event that cannot be written with its schema (names the field)."""


class InvalidEvent(EventsError):
    """An event whose fields break a rule the schema cannot express."""


class BrokerUnavailable(EventsError):
    """No Kafka broker answered at the configured bootstrap address."""


class NoBootstrapAddress(BrokerUnavailable):
    """No bootstrap address was given at all; the message says every way to give one."""


class Fenced(EventsError):
    """A newer instance with the same identity has taken over; stop writing."""


class ConsumerFenced(Fenced):
    """A newer consumer with the same ``group.instance.id`` has taken this one's place."""


class ProducerFenced(Fenced):
    """A newer producer with the same transactional id has taken over.

    The holder must stop: everything it still wants to write would be refused,
    and that is the point of fencing.
    """


class KafkaOperationError(EventsError):
    """A Kafka call failed in a way the caller must handle (names the call)."""


class CredentialsError(EventsError):
    """The credentials file cannot be used (names the file and, where it can, the line)."""


class NotAuthorized(EventsError):
    """The broker refused this principal an operation on a resource (names all three)."""

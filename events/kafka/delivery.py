"""A worker's reports reach the log while its heartbeats go on: a slow flush is not a failure.

A worker flushes where the protocol needs its reports on the log (a step, the
shards before a proposal, everything before it exits). On a loaded machine or
during a broker failover that can take far longer than the few seconds a
healthy broker needs, and a worker that gave up after a fixed 10 s exited 1
with every step done, a failure the retry policy then paid for. So a flush
here waits as long as librdkafka itself keeps trying to deliver
(``REPORT_DELIVERY_S``, set as the workers' producers' ``message.timeout.ms``),
and a little more: by then every record sent before the flush has been
delivered or has failed with librdkafka's own error, and only such a failure
fails the worker.

Heartbeats must not stop meanwhile: a process that is waiting for the log is
alive, and a silence is what the controller calls a hang. But a heartbeat
sent during the flush is one more record in the producer's queue, and with
deliveries slower than the heartbeat interval the queue would never empty,
so :func:`drain` waits only for the records sent before it began. Every
report of a worker is keyed by its run id, so they share one partition, and
an idempotent producer completes one partition's records in the order they
were sent: once the queue holds no more records than were sent since the
drain began, every record before it is done.

Tested in tests/events/kafka/test_delivery.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from events.kafka.clients import EventProducer

# How long librdkafka tries to deliver a worker's report before failing it
# (message.timeout.ms; librdkafka's own default is 300 s).
REPORT_DELIVERY_S = 120.0
# What a worker's flush waits for: the delivery timeout and a margin, so the
# records of a flush have all been delivered or failed by librdkafka when it ends.
FLUSH_TIMEOUT_S = REPORT_DELIVERY_S + 10.0
# Between two looks at the queue, delivery reports are served for this long.
POLL_S = 0.05


def report_producer_config() -> dict[str, Any]:
    """The producer settings of a worker's reports (``EventProducer(config=...)``)."""
    return {"message.timeout.ms": int(REPORT_DELIVERY_S * 1000)}


def drain(producer: EventProducer, sent_since: Callable[[], int],
          timeout_s: float = FLUSH_TIMEOUT_S) -> int:
    """Wait until every record sent before this call is delivered or has failed.

    ``sent_since()`` counts the records sent since the drain began (heartbeats, from
    this thread or another); it is called on every turn, so a caller whose thread
    also heartbeats sends its due beats from it. It must count a record only after
    sending it. Failures reach each record's ``on_failure`` as usual. Returns how
    many records sent before the drain were still queued at ``timeout_s`` (0: none).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        producer.poll(POLL_S)
        # Count first: a record sent between the two reads then only makes the
        # queue look longer, never a record before the drain look done.
        sent = sent_since()
        left = producer.pending() - sent
        if left <= 0:
            return 0
        if time.monotonic() >= deadline:
            return left

"""Benchmark: what the secure default costs, against the same work on a plaintext broker.

Usage: ``.venv/bin/python bench/security.py [--quick]``

Starts two local one-node stacks of its own (``runledger stack up`` and
``runledger stack up --insecure``) and measures, on each, in turns:

1. connect: a new client's first metadata answer (``check_broker``), which on
   the secure stack includes the SCRAM-SHA-512 handshake;
2. write: ``EventProducer`` (acks=all, idempotent) sending N heartbeat reports
   and flushing, as the agent principal;
3. read: a bounded ``read_log`` of those N records, as the projector principal.

Each ratio is secure events/s (or connects/s) divided by plaintext, both
measured in this run: 1.00 means authentication and authorization cost nothing
measurable. Also the per-record cost of an Ed25519 signature and its check
against the Avro encoding of the same record. Nothing is asserted on time.
Results go to ``bench/results/security.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as a script, Python puts bench/ first on sys.path; use the repository root.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bench.common import fmt_num, machine_info, print_table, ratio, time_interleaved, write_results
from events.codec import default_codec
from events.kafka.broker import check_broker
from events.kafka.clients import EventProducer
from events.kafka.connection import ENV_CREDENTIALS
from events.kafka.consume import read_log
from events.signed.signing import SigningKey, request_message
from events.topics import REPORTS
from runledger.stack import Stack, StackInfo
from tests.events.builders import Ev


@contextmanager
def as_role(info: StackInfo, role: str) -> Iterator[None]:
    """This process's clients act as ``role`` of a secure stack (nobody on a plaintext one)."""
    before = os.environ.get(ENV_CREDENTIALS)
    creds = "" if info.credentials is None else str(info.credentials.parent / f"{role}.properties")
    os.environ[ENV_CREDENTIALS] = creds
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_CREDENTIALS, None)
        else:
            os.environ[ENV_CREDENTIALS] = before


def workload(info: StackInfo, count: int, tag: str) -> dict[str, Callable[[], object]]:
    run = f"bench-sec-{tag}-{os.getpid()}"
    events = [Ev(run).heartbeat(1, "r0", step=i, node="n1", n=i) for i in range(count)]

    def connect() -> None:
        with as_role(info, "operator"):
            check_broker(info.bootstrap, timeout_s=10)

    def write() -> None:
        with as_role(info, "agent"):
            producer = EventProducer(info.bootstrap, client_id="bench-security")
            for event in events:
                producer.send(REPORTS, event)
                producer.poll(0)
            producer.flush(60)

    def read() -> None:
        with as_role(info, "projector"):
            seen = sum(1 for _ in read_log(info.bootstrap, REPORTS))
        assert seen >= count, f"read {seen} of at least {count}"

    return {f"{tag} connect": connect, f"{tag} write": write, f"{tag} read": read}


def signing_costs(count: int) -> dict[str, float]:
    """Microseconds per record: Avro encoding, an Ed25519 signature, its check."""
    codec = default_codec()
    key = SigningKey.generate()
    events = [Ev("bench-sign").heartbeat(1, "r0", step=i, node="n1", n=i) for i in range(count)]
    started = time.perf_counter()
    values = [codec.encode(e) for e in events]
    encode = time.perf_counter() - started
    started = time.perf_counter()
    signatures = [key.sign(request_message(v)) for v in values]
    sign = time.perf_counter() - started
    public = key.public
    started = time.perf_counter()
    checked = [public.verify(request_message(v), s)
               for v, s in zip(values, signatures, strict=True)]
    verify = time.perf_counter() - started
    assert all(checked)
    return {name: seconds / count * 1e6
            for name, seconds in (("encode", encode), ("sign", sign), ("verify", verify))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer records and repeats.")
    args = parser.parse_args(argv)
    count, repeats = (500, 2) if args.quick else (5000, 5)
    with tempfile.TemporaryDirectory(prefix="runledger-bench-security-") as tmp:
        secure_stack = Stack(Path(tmp) / "secure")
        plain_stack = Stack(Path(tmp) / "plain", secure=False)
        try:
            secure, plain = secure_stack.up(), plain_stack.up()
            fns = {**workload(secure, count, "secure"), **workload(plain, count, "plain")}
            timings = time_interleaved(fns, repeats=repeats)
        finally:
            secure_stack.down(purge=True)
            plain_stack.down(purge=True)
    rows, results = [], {}
    for what, unit in (("connect", 1), ("write", count), ("read", count)):
        s_rate = unit / timings[f"secure {what}"].median
        p_rate = unit / timings[f"plain {what}"].median
        rows.append([what, fmt_num(p_rate, 1), fmt_num(s_rate, 1), f"{ratio(s_rate, p_rate):.2f}"])
        results[what] = {"plain_per_s": p_rate, "secure_per_s": s_rate,
                         "ratio": ratio(s_rate, p_rate)}
    print_table(["operation", "plaintext /s", "secure /s", "ratio"], rows,
                f"secure (SASL/SCRAM + ACLs) against --insecure, {count} records, "
                f"median of {repeats}")
    costs = signing_costs(count)
    print_table(["per record", "us", "ratio to encode"],
                [[name, f"{us:.1f}", f"{ratio(us, costs['encode']):.2f}"]
                 for name, us in costs.items()], "Ed25519 against Avro encoding")
    data: dict[str, Any] = {"machine": machine_info(["confluent-kafka", "cryptography"]),
                            "records": count, "repeats": repeats, "broker": results,
                            "signing_us": costs}
    print(f"wrote {write_results('security', data)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CRC-64-AVRO (the Rabin fingerprint of the Avro specification).

Computed over a schema's Parsing Canonical Form; the 8 bytes, little-endian,
follow the ``C3 01`` marker in single-object encoding.
"""

from __future__ import annotations

EMPTY = 0xC15D213AA4D7A795


def _table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_TABLE = _table()


def crc64_avro(data: bytes) -> int:
    fp = EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def fingerprint_bytes(canonical_form: str) -> bytes:
    """The 8-byte little-endian fingerprint that single-object encoding writes."""
    return crc64_avro(canonical_form.encode("utf-8")).to_bytes(8, "little")

"""events/fingerprint.py: CRC-64-AVRO against the Avro specification's vector and fastavro."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

from events.fingerprint import crc64_avro, fingerprint_bytes

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_crc64_avro_spec_vector() -> None:
    # Avro specification: the fingerprint of "int" is 0x7275d51a3f395c8f.
    assert crc64_avro(b'"int"') == 0x7275D51A3F395C8F
    assert fingerprint_bytes('"int"') == bytes.fromhex("8f5c393f1ad57572")


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.avsc")), ids=lambda p: p.name)
def test_crc64_matches_fastavro_for_every_schema_file(path: Path) -> None:
    canonical = to_parsing_canonical_form(json.loads(path.read_text("utf-8")))
    expected = fastavro_fingerprint(canonical, "CRC-64-AVRO")
    assert crc64_avro(canonical.encode()).to_bytes(8, "little").hex() == expected
    assert fingerprint_bytes(canonical).hex() == expected


@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_crc64_matches_fastavro_on_any_text(text: str) -> None:
    assert fingerprint_bytes(text).hex() == fastavro_fingerprint(text, "CRC-64-AVRO")

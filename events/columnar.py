"""The compiled read path: a batch of record values to Arrow columns, one table per type.

``runledger_native`` (the Rust crate in ``native/``, built by ``make venv``)
reads Avro single-object records as :mod:`events.codec` does, by the writer
schema their fingerprint names, resolved into the newest schema of their type,
but leaves no Python object per record: each type's records come back as one
Arrow record batch whose columns are the newest schema's fields (the header a
struct column; an array a list; a map a map of string keys, its entries by key;
``["null", X]`` a nullable X). The loop runs in compiled code without the GIL.

What it does not do, and :meth:`events.codec.Codec.decode` does, record by
record: the upcasters of changes of meaning, the 32-bit check of ``int``
fields (an ``int`` past 32 bits is ``body_invalid`` here, ``int_out_of_range``
there), the rules of the event classes, and unpacking members written as blocks
(``events.placement``): those are for the reader of the columns to apply, in
bulk. One known difference in what is read: a boolean byte other than 0 or 1 in a
record of an older writer is refused here (apache-avro's resolution is strict) and
read as true by fastavro; a reader that sends refused records to the codec (the
projector does) still gets the codec's answer. :func:`payloads` writes each
record's ``events`` payload from the columns. The Python codec stays the
reference: tests/events/test_columnar.py holds these columns to its records on
every schema file, and tests/events/test_columnar_payload.py the payloads to
``projectors.payload``.

Tested in tests/events/test_columnar.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from events.compiled import native
from events.registry import SchemaRegistry

# Whether the compiled read path is here; without it a reader keeps to events.codec.
NATIVE = native is not None


@dataclass(frozen=True, slots=True)
class Columns:
    """One batch, decoded: ``kinds[i]`` is value i's index in ``types`` (-1: refused);
    ``versions[i]`` the version of the schema file that wrote it (-1: refused);
    ``batches`` each type's records, in their order among the values; ``refused``
    (index, reason, detail) with ``events.codec``'s reasons."""

    types: tuple[str, ...]
    kinds: pa.Int32Array
    versions: pa.Int32Array
    batches: dict[str, pa.RecordBatch]
    refused: list[tuple[int, str, str]]

    def __len__(self) -> int:
        return len(self.kinds)


class ColumnarDecoder:
    """Decodes batches of record values by the schema files of ``registry``."""

    def __init__(self, registry: SchemaRegistry | None = None) -> None:
        self.registry = registry or SchemaRegistry.from_directory()
        names = self.registry.event_types()
        readers = [(name, json.dumps(self.registry.latest(name).schema)) for name in names]
        writers = [(sv.fingerprint, name, sv.version, json.dumps(sv.schema))
                   for name in names for sv in self.registry.versions(name)]
        if native is None:
            raise ImportError("runledger_native is not built: `make venv` builds native/")
        self._native = native.BatchDecoder(readers, writers)
        self.types = tuple(self._native.event_types())

    def decode(self, values: Sequence[bytes | None]) -> Columns:
        kinds, versions, batches, refused = self._native.decode(list(values))
        return Columns(self.types, kinds, versions, batches, refused)


def payloads(batch: pa.RecordBatch) -> pa.StringArray:
    """The ``events`` table's payload of each record of one type's ``batch``: every
    field but the header as the canonical JSON of :func:`projectors.payload.payload`,
    byte for byte (for records the upcasters and ``events.placement`` leave as they are:
    an upcast or inflated record's payload is of its new fields)."""
    assert native is not None, "runledger_native is not built"
    text: pa.StringArray = native.payloads(batch)
    return text

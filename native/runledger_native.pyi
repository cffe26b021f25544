"""runledger's compiled paths (native/src/lib.rs): Avro records to Arrow columns, and
Ed25519 signatures verified in bulk (native/src/verify.rs)."""

import pyarrow as pa

class BatchDecoder:
    def __init__(self, readers: list[tuple[str, str]],
                 writers: list[tuple[bytes, str, int, str]]) -> None: ...
    def decode(self, values: list[bytes | None]
               ) -> tuple[pa.Int32Array, dict[str, pa.RecordBatch], list[tuple[int, str, str]]]: ...
    def event_types(self) -> list[str]: ...

def verify_many(function: int, publics: list[bytes], messages: list[bytes],
                signatures: list[bytes], threads: int) -> list[bool]: ...

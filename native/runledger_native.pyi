"""runledger's compiled read path (native/src/lib.rs): Avro records to Arrow columns."""

import pyarrow as pa

class BatchDecoder:
    def __init__(self, readers: list[tuple[str, str]],
                 writers: list[tuple[bytes, str, int, str]]) -> None: ...
    def decode(self, values: list[bytes | None]
               ) -> tuple[pa.Int32Array, dict[str, pa.RecordBatch], list[tuple[int, str, str]]]: ...
    def event_types(self) -> list[str]: ...

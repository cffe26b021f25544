"""runledger's compiled paths (native/src/lib.rs): Avro records to Arrow columns
and their canonical JSON payloads (native/src/payload.rs),
Ed25519 signatures verified in bulk (native/src/verify.rs), and the data plane's
planner loop (native/src/planner.rs)."""

from collections.abc import Callable
from typing import Any

import pyarrow as pa

class BatchDecoder:
    def __init__(self, readers: list[tuple[str, str]],
                 writers: list[tuple[bytes, str, int, str]]) -> None: ...
    def decode(self, values: list[bytes | None]
               ) -> tuple[pa.Int32Array, pa.Int32Array, dict[str, pa.RecordBatch],
                          list[tuple[int, str, str]]]: ...
    def event_types(self) -> list[str]: ...

def payloads(batch: pa.RecordBatch) -> pa.StringArray: ...

def verify_many(function: int, publics: list[bytes], messages: list[bytes],
                signatures: list[bytes], threads: int) -> list[bool]: ...

class OrderCore:
    """dataplane.order.Planner's plan_batch loop (native/src/planner.rs)."""
    def __init__(self, records: list[int], seq_len: int, packing_none: bool, unit: str,
                 replacement: bool, exhaustion: str, expected: bool, draw_key: list[int],
                 crop_key: list[int], mix_key: int, crops: list[tuple[int, bool]],
                 filters: list[list[tuple[bool, int]]], probs: list[float],
                 lengths: Callable[[int, int], int], epoch_key: Callable[[int, int], int],
                 weights_of: Callable[[tuple[bool, ...]], tuple[list[int], int]],
                 span: Callable[..., Any],
                 blocks: Callable[[int, int], tuple[int, Any]] | None = None) -> None: ...
    def plan_batch(self, state: tuple[Any, ...], size: int) -> Any: ...

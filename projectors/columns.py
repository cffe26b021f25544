"""The projection's column types: a DuckDB type with its Arrow type, and the
annotated aliases ``projectors.rows`` declares each row's fields with (an
``Opt`` alias where the column may be NULL).

Tested in tests/projectors/test_tables.py.
"""

from dataclasses import dataclass
from typing import Annotated

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class SqlType:
    """A DuckDB column type and the Arrow type a batch of its values is built as."""

    name: str
    arrow: pa.DataType


VARCHAR = SqlType("VARCHAR", pa.string())
INTEGER = SqlType("INTEGER", pa.int32())
BIGINT = SqlType("BIGINT", pa.int64())
DOUBLE = SqlType("DOUBLE", pa.float64())
JSON = SqlType("JSON", pa.string())
BLOB = SqlType("BLOB", pa.binary())

Varchar = Annotated[str, VARCHAR]
OptVarchar = Annotated[str | None, VARCHAR]
Integer = Annotated[int, INTEGER]
Bigint = Annotated[int, BIGINT]
OptBigint = Annotated[int | None, BIGINT]
Double = Annotated[float, DOUBLE]
OptDouble = Annotated[float | None, DOUBLE]
Json = Annotated[str, JSON]
OptBlob = Annotated[bytes | None, BLOB]

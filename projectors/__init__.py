"""projectors: Kafka -> DuckDB read models, rebuilt from the log at will.

- ``rows``: one typed row declaration per table; each field carries its DuckDB type.
- ``tables``: the tables (DDL, columns, Arrow schema, all derived from the row
  types) and the pure mapping from a log record to rows.
- ``fastpath``: which records of a batch take the compiled route (decoded to Arrow
  columns in compiled code, ``events.columnar``) and which the Python route
  (``events.codec``, ``tables.rows_for``); ``fastrows``: the compiled route's rows,
  picked from the columns.
- ``projector``: the batch loop with offsets in the same transaction, replay,
  and per-table content digests for comparing a replay with the live tables.
- ``payload``: the ``events`` table's payload, an event's fields as canonical JSON;
  ``columns``: the DuckDB column types the rows are declared with.
- ``snapshot``: the read-only copy a running projector publishes for readers
  (checkpoint, copy, fsync, atomic rename), with the positions and log ends it reflects.
- ``metrics``: the Prometheus collector (throughput, quarantine, lag, ETTR,
  silent-data-corruption suspicions and verdicts per run).
- ``errors``: ``ProjectorError``, the package's root (a projection file another
  version made: ``ProjectionLayoutError``).
"""

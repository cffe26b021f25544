-- Recovery: the facts RPO per failure domain is folded from, in log order.
-- `runledger query recovery RUN` folds them (queries/recovery.py over
-- events/recovery.py) into, per failure domain over time, the committed step,
-- the newest step recoverable after that domain's loss, the gap against the
-- spec's checkpoint.rpo, and the RTO of the domain's incidents; this file
-- alone lists the facts. CheckpointReplicated and the spec come from the
-- events table's payloads, so projections made before need no replay.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/recovery.sql
SELECT
    ofs AS log_offset,
    event_type,
    event_id,
    occurred_at,
    CAST(json_extract(payload, '$.step') AS BIGINT) AS step,
    CAST(json_extract(payload, '$.resume_step') AS BIGINT) AS resume_step,
    CAST(json_extract(payload, '$.step_time_ms') AS DOUBLE) AS step_time_ms,
    json_extract_string(payload, '$.manifest_digest') AS manifest_digest,
    json_extract_string(payload, '$.tier') AS tier,
    json_extract_string(payload, '$.protects') AS protects,
    json_extract_string(payload, '$.failure_class') AS failure_class,
    json_extract_string(payload, '$.signature') AS signature,
    json_extract_string(payload, '$.node') AS node,
    json_extract_string(payload, '$.spec_json') AS spec_json
FROM events
WHERE run_id = getvariable('run_id') AND topic = 'runledger.runs'
  AND event_type IN ('RunSubmitted', 'StepCommitted', 'GenerationStarted', 'ManifestCommitted',
                     'CheckpointReplicated', 'CheckpointRevoked', 'FailureClassified')
ORDER BY part, ofs;

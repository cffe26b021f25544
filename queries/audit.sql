-- Audit: every fact of a run in causal order (the order of runledger.runs, which
-- the controller appends in transactions and keys by run, so one partition holds
-- them in the order they were decided), with the report each fact answers.
-- Rejections are facts too (WriteRejected), with the refused event's id and reason.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/audit.sql
SELECT
    e.ofs AS log_offset,
    epoch_ms(e.occurred_at) AS occurred_at,
    e.generation,
    e.event_type,
    e.producer,
    e.causation_id AS caused_by,
    CASE e.event_type
        WHEN 'WriteRejected' THEN json_extract_string(e.payload, '$.rejected_event_type')
            || ' refused: ' || json_extract_string(e.payload, '$.reason')
            || ' (' || json_extract_string(e.payload, '$.detail') || ')'
        WHEN 'FailureClassified' THEN json_extract_string(e.payload, '$.failure_class') || ' '
            || json_extract_string(e.payload, '$.signature') || ' -> '
            || json_extract_string(e.payload, '$.action')
        WHEN 'GenerationStarted' THEN json_extract_string(e.payload, '$.reason')
            || coalesce(' from step ' || json_extract_string(e.payload, '$.resume_step'), '')
        WHEN 'ManifestCommitted' THEN 'step ' || json_extract_string(e.payload, '$.step')
        WHEN 'CursorAdvanced' THEN 'step ' || json_extract_string(e.payload, '$.step')
            || ' position ' || json_extract_string(e.payload, '$.position')
        WHEN 'CheckpointRevoked' THEN 'step ' || json_extract_string(e.payload, '$.step')
            || ': ' || json_extract_string(e.payload, '$.reason')
        WHEN 'StepCommitted' THEN 'step ' || json_extract_string(e.payload, '$.step')
        WHEN 'RunFinished' THEN json_extract_string(e.payload, '$.outcome') || ': '
            || json_extract_string(e.payload, '$.reason')
        WHEN 'RunCancelled' THEN json_extract_string(e.payload, '$.reason')
        WHEN 'RunManifestPublished' THEN json_extract_string(e.payload, '$.digest')
            || coalesce(' at ' || nullif(json_extract_string(e.payload, '$.path'), ''), '')
        WHEN 'RunQueued' THEN json_extract_string(e.payload, '$.reason')
        WHEN 'AlertRaised' THEN json_extract_string(e.payload, '$.alert') || ' '
            || json_extract_string(e.payload, '$.severity') || ': '
            || json_extract_string(e.payload, '$.detail')
        WHEN 'AlertResolved' THEN json_extract_string(e.payload, '$.alert') || ': '
            || json_extract_string(e.payload, '$.detail')
        WHEN 'WorkerExited' THEN json_extract_string(e.payload, '$.logical_id')
            || coalesce(' exit ' || json_extract_string(e.payload, '$.exit_code'), '')
            || coalesce(' signal ' || json_extract_string(e.payload, '$.signal'), '')
        ELSE ''
    END AS summary,
    e.event_id
FROM events e
WHERE e.run_id = getvariable('run_id') AND e.topic = 'runledger.runs'
ORDER BY e.part, e.ofs;

-- Provenance of a checkpoint: its lineage back to the run's start, each link with
-- the data it consumed.
--
-- The parent of a checkpoint is the previous one committed in its generation,
-- else the one its generation resumed from (GenerationStarted.resume_manifest);
-- so the chain follows what the weights were actually trained from, skipping
-- revoked checkpoints and work lost to restarts. For each link: the dataset
-- manifest id, the global sample positions [position_from, position_to) the
-- steps (step_from, step] consumed, the per-source counts (in the mixture's
-- unit) at the checkpoint and since the parent, and the code version of the
-- run. The tokenizer is part of the dataset manifest, which the dataset id
-- pins; `runledger query provenance` adds it from the catalog.
--
-- A job that loads its own data commits checkpoints without a data cursor: the
-- dataset id is then the one the run was submitted with (runs.dataset_id;
-- dataset_from says which: 'cursor' or 'run_spec', NULL when neither names one),
-- positions_recorded is false and the positions and per-source counts are NULL
-- (not recorded, never guessed). The last three columns, the same on every row,
-- say how the run ended: run_outcome is succeeded, failed, cancelled or
-- unfinished, run_ended_at and run_end_reason NULL while it is unfinished.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; SET VARIABLE checkpoint_step = NULL;
--             .read queries/provenance.sql   (NULL: the latest committed checkpoint)
WITH RECURSIVE
live AS (
    SELECT c.generation, c.step, c.manifest_path, c.manifest_digest, c.committed_at,
           u.dataset_id, u.epoch, u.position, u.topic AS c_topic, u.part AS c_part,
           u.ofs AS c_ofs
    FROM checkpoints c
    LEFT JOIN cursors u ON u.run_id = c.run_id AND u.step = c.step
                       AND u.generation = c.generation
    WHERE c.run_id = getvariable('run_id')
      AND NOT EXISTS (SELECT 1 FROM revocations r WHERE r.run_id = c.run_id
                      AND r.manifest_digest = c.manifest_digest)
),
parents AS (
    SELECT l.*,
           coalesce(
               (SELECT p.manifest_digest FROM live p WHERE p.generation = l.generation
                  AND p.step < l.step ORDER BY p.step DESC LIMIT 1),
               (SELECT p.manifest_digest FROM live p JOIN generations g
                  ON g.run_id = getvariable('run_id') AND g.generation = l.generation
                  AND p.manifest_path = g.resume_manifest AND p.step = g.resume_step
                  ORDER BY p.generation DESC LIMIT 1)) AS parent_digest
    FROM live l
),
target AS (
    SELECT manifest_digest FROM parents
    WHERE (TRY_CAST(getvariable('checkpoint_step') AS BIGINT) IS NULL
           AND step = (SELECT max(step) FROM live))
       OR step = TRY_CAST(getvariable('checkpoint_step') AS BIGINT)
    ORDER BY generation DESC LIMIT 1
),
chain(depth, manifest_digest) AS (
    SELECT 0, manifest_digest FROM target
    UNION ALL
    SELECT c.depth + 1, p.parent_digest
    FROM chain c JOIN parents p ON p.manifest_digest = c.manifest_digest
    WHERE p.parent_digest IS NOT NULL AND c.depth < 100000
),
linked AS (
    SELECT c.depth, x.*, p.step AS parent_step, p.position AS parent_position,
           p.c_topic AS p_topic, p.c_part AS p_part, p.c_ofs AS p_ofs,
           -- the segment began at its parent's commit when both lie in one generation,
           -- else when its generation started (a restart resumes from an older parent)
           CASE WHEN p.generation = x.generation THEN p.committed_at
                ELSE (SELECT min(g.started_at) FROM generations g
                      WHERE g.run_id = getvariable('run_id')
                        AND g.generation = x.generation) END AS began_at
    FROM chain c JOIN parents x USING (manifest_digest)
    LEFT JOIN parents p ON p.manifest_digest = x.parent_digest
),
ending AS (  -- the run's end: its first RunFinished or RunCancelled (none while it runs)
    SELECT outcome, occurred_at, reason FROM endings WHERE run_id = getvariable('run_id')
    ORDER BY topic, part, ofs LIMIT 1
),
counts AS (
    SELECT l.manifest_digest,
           to_json(map_from_entries(list((sc.source, sc.count) ORDER BY sc.source)))
               AS source_counts,
           to_json(map_from_entries(list((sc.source, sc.count - coalesce(ps.count, 0))
                                         ORDER BY sc.source))) AS source_delta
    FROM linked l
    JOIN source_counts sc ON sc.topic = l.c_topic AND sc.part = l.c_part AND sc.ofs = l.c_ofs
    LEFT JOIN source_counts ps ON ps.topic = l.p_topic AND ps.part = l.p_part
        AND ps.ofs = l.p_ofs AND ps.source = sc.source
    GROUP BY l.manifest_digest
)
SELECT
    l.depth, l.generation, l.step, coalesce(l.parent_step, 0) AS step_from,
    coalesce(l.dataset_id, (SELECT r.dataset_id FROM runs r
                            WHERE r.run_id = getvariable('run_id') LIMIT 1)) AS dataset_id,
    l.epoch,
    -- the root starts at 0; a link without a cursor, or whose parent has none, has no range
    CASE WHEN l.position IS NULL THEN NULL WHEN l.parent_digest IS NULL THEN 0
         ELSE l.parent_position END AS position_from,
    l.position AS position_to,
    k.source_counts, k.source_delta,
    (SELECT json_extract_string(json_extract_string(e.payload, '$.spec_json'), '$.code_version')
       FROM events e WHERE e.run_id = getvariable('run_id') AND e.event_type = 'RunSubmitted'
       AND e.topic = 'runledger.runs' LIMIT 1) AS code_version,
    l.manifest_digest, l.parent_digest, l.manifest_path, epoch_ms(l.committed_at) AS committed_at,
    epoch_ms(l.began_at) AS started_at,
    CASE WHEN l.dataset_id IS NOT NULL THEN 'cursor'
         WHEN (SELECT r.dataset_id FROM runs r WHERE r.run_id = getvariable('run_id')
               LIMIT 1) IS NOT NULL THEN 'run_spec' END AS dataset_from,
    l.position IS NOT NULL AS positions_recorded,
    coalesce(e.outcome, 'unfinished') AS run_outcome, epoch_ms(e.occurred_at) AS run_ended_at,
    e.reason AS run_end_reason
FROM linked l LEFT JOIN counts k USING (manifest_digest)
LEFT JOIN ending e ON true
ORDER BY l.depth;

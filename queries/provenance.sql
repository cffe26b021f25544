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
    l.dataset_id, l.epoch,
    coalesce(l.parent_position, 0) AS position_from, l.position AS position_to,
    k.source_counts, k.source_delta,
    (SELECT json_extract_string(json_extract_string(e.payload, '$.spec_json'), '$.code_version')
       FROM events e WHERE e.run_id = getvariable('run_id') AND e.event_type = 'RunSubmitted'
       AND e.topic = 'runledger.runs' LIMIT 1) AS code_version,
    l.manifest_digest, l.parent_digest, l.manifest_path, epoch_ms(l.committed_at) AS committed_at,
    epoch_ms(l.began_at) AS started_at
FROM linked l LEFT JOIN counts k USING (manifest_digest)
ORDER BY l.depth;

-- Incidents: each interruption (FailureClassified) of a run, with
--   detection_s  from the fault (the first abnormal WorkerExited of the
--                generation, else its last step) to the classification;
--   rto_s        from the fault to the first step of the next generation;
--   resumed_from the step the next generation restored (from its ranks'
--                CheckpointRestored; the generation's resume_step when none
--                reported), and restored_tier the storage tier it came from
--                (after a host loss a farther tier, maybe an older step);
--   rpo_steps    steps of work lost: the last step reached before the fault
--                minus resumed_from;
--   rpo_s        the same in time: from when the resumed step was trained to
--                the fault.
-- A failure with no later generation (escalated, cancelled) has no RTO.
-- A lost node (NodeLost before the failure, infrastructure:node_lost): node is
-- the node that was lost, lost_node too, last_seen_at its last report (the
-- fault: detection starts there, but not before the generation's last step,
-- which every rank took part in), and consequences (JSON) the survivors'
-- failures that followed it, not causes; NULL for other failures.
-- log_path and stderr_tail: the failed worker's output file (on its node) and
-- its last lines, as FailureClassified v2 carries them ('' before v2).
--
-- Silent data corruption: a generation's CorruptionSuspected (the first; its ranks
-- then all exit 87) joins that generation's failure; a suspicion with no failure
-- yet (not classified, or the run ended) is an incident of its own, failure_class
-- 'silent_corruption', with only its own columns. The sdc_* columns:
--   sdc_detector, sdc_step, sdc_ranks (JSON, [] = every rank), sdc_nodes (the
--                suspect ranks' nodes, JSON);
--   verdict      the CorruptionClassified of that (generation, step), NULL while
--                the suspicion is open, with verdict_detail;
--   rollback_step the newest checkpoint at a step below it committed, and not
--                revoked, before the next generation started (what a restart resumes
--                from; 0 and no manifest: from the start), rollback_manifest its digest;
--   revoked_checkpoints the checkpoints at or after the suspect step committed
--                before the suspicion: state it may have corrupted;
--   steps_lost   sdc_step - rollback_step: steps trained again, the suspect one too.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/incidents.sql
WITH
gens AS (
    SELECT generation, started_at, coalesce(resume_step, 0) AS resume_step, reason
    FROM generations WHERE run_id = getvariable('run_id')
),
f AS (
    SELECT f.*,
           (SELECT max(step) FROM steps s WHERE s.run_id = f.run_id
              AND s.generation = f.generation) AS last_step,
           (SELECT max(occurred_at) FROM steps s WHERE s.run_id = f.run_id
              AND s.generation = f.generation) AS last_step_at,
           (SELECT min(x.occurred_at) FROM exits x WHERE x.run_id = f.run_id
              AND x.generation = f.generation
              AND (x.signal IS NOT NULL OR x.exit_code <> 0)) AS exited_at,
           (SELECT min(generation) FROM gens g WHERE g.generation > f.generation) AS next_gen,
           l.node AS lost_node, l.last_seen_at, l.consequences
    FROM failures f
    LEFT JOIN (SELECT * FROM lost_nodes WHERE run_id = getvariable('run_id')
               QUALIFY row_number() OVER (PARTITION BY generation ORDER BY ofs) = 1) l
      ON l.generation = f.generation
    WHERE f.run_id = getvariable('run_id')
),
sus AS (  -- restart_ofs: where the next generation starts in the run's partition
    SELECT x.*, coalesce((SELECT min(g.ofs) FROM generations g WHERE g.run_id = x.run_id
                            AND g.topic = x.topic AND g.part = x.part AND g.ofs > x.ofs),
                         9223372036854775807) AS restart_ofs
    FROM sdc_suspicions x WHERE x.run_id = getvariable('run_id')
    QUALIFY row_number() OVER (PARTITION BY x.generation ORDER BY x.ofs) = 1
),
held AS (
    -- Per suspicion, the checkpoints in force: below the suspect step, those committed
    -- and not revoked before the restart (what it resumes from; an async commit may
    -- land after the suspicion); at or after it, those committed and not revoked
    -- before the suspicion (what it revokes). One run's facts share a partition, so
    -- offsets are its log order.
    SELECT s.ofs AS sus_ofs, s.step AS sus_step, c.step, c.manifest_digest, c.topic, c.part,
           c.ofs, CASE WHEN c.step < s.step THEN s.restart_ofs ELSE s.ofs END AS until_ofs
    FROM sus s JOIN checkpoints c ON c.run_id = s.run_id AND c.topic = s.topic
      AND c.part = s.part
),
kept AS (
    SELECT * FROM held h WHERE h.ofs < h.until_ofs AND NOT EXISTS (
        SELECT 1 FROM revocations r WHERE r.run_id = getvariable('run_id')
          AND r.manifest_digest = h.manifest_digest AND r.topic = h.topic
          AND r.part = h.part AND r.ofs < h.until_ofs)
),
sdc AS (
    SELECT s.generation AS sdc_generation, s.occurred_at AS suspected_at,
           s.detail AS sdc_detail, s.detector AS sdc_detector, s.step AS sdc_step,
           s.ranks AS sdc_ranks, s.suspect_nodes AS sdc_nodes,
           v.verdict, v.detail AS verdict_detail,
           coalesce(b.step, 0) AS rollback_step, b.manifest_digest AS rollback_manifest,
           (SELECT count(*) FROM kept k WHERE k.sus_ofs = s.ofs
              AND k.step >= k.sus_step) AS revoked_checkpoints,
           s.step - coalesce(b.step, 0) AS steps_lost
    FROM sus s
    LEFT JOIN (SELECT * FROM sdc_verdicts WHERE run_id = getvariable('run_id')
               QUALIFY row_number() OVER (PARTITION BY suspected_generation, step
                                          ORDER BY ofs) = 1) v
      ON v.suspected_generation = s.generation AND v.step = s.step
    LEFT JOIN (SELECT sus_ofs, max(step) AS step, arg_max(manifest_digest, step)
                        AS manifest_digest
               FROM kept WHERE step < sus_step GROUP BY sus_ofs) b ON b.sus_ofs = s.ofs
),
g AS (
    SELECT f.*,
           least(f.occurred_at, coalesce(f.exited_at, f.last_step_at,
                 (SELECT started_at FROM gens WHERE generation = f.generation)),
                 (SELECT suspected_at FROM sdc WHERE sdc_generation = f.generation),
                 CASE WHEN f.last_seen_at IS NOT NULL THEN greatest(f.last_seen_at,
                     coalesce(f.last_step_at,
                              (SELECT started_at FROM gens WHERE generation = f.generation)))
                 END)
             AS fault_at,
           coalesce((SELECT min(r.step) FROM restores r WHERE r.run_id = f.run_id
                       AND r.generation = f.next_gen), n.resume_step) AS resumed_from,
           (SELECT string_agg(DISTINCT r.tier, ',' ORDER BY r.tier) FROM restores r
             WHERE r.run_id = f.run_id AND r.generation = f.next_gen) AS restored_tier,
           (SELECT min(s.occurred_at - s.step_time_ms) FROM steps s
             WHERE s.run_id = f.run_id AND s.generation = f.next_gen) AS resumed_at,
           n.resume_step AS resume_step
    FROM f LEFT JOIN gens n ON n.generation = f.next_gen
),
h AS (
    SELECT g.*,
           (SELECT min(s.occurred_at) FROM steps s WHERE s.run_id = g.run_id
              AND s.generation <= g.generation AND s.step = g.resumed_from) AS resumed_step_at
    FROM g
),
incident AS (
    SELECT
        occurred_at AS sort_at,
        generation,
        epoch_ms(fault_at) AS fault_at,
        failure_class,
        signature,
        logical_id AS member,
        node,
        action,
        attempt,
        round((occurred_at - fault_at) / 1000.0, 3) AS detection_s,
        round((resumed_at - fault_at) / 1000.0, 3) AS rto_s,
        last_step,
        resumed_from,
        restored_tier,
        last_step - resumed_from AS rpo_steps,
        round((fault_at - coalesce(resumed_step_at,
                                   (SELECT started_at FROM gens WHERE generation = 1))) / 1000.0,
              3) AS rpo_s,
        detail,
        log_path,
        stderr_tail,
        lost_node,
        epoch_ms(last_seen_at) AS last_seen_at,
        consequences
    FROM h
)
SELECT * EXCLUDE (sort_at, sdc_generation, suspected_at, sdc_detail) FROM (
    SELECT i.*, sdc.* FROM incident i LEFT JOIN sdc ON sdc.sdc_generation = i.generation
    UNION ALL BY NAME
    SELECT suspected_at AS sort_at, sdc_generation AS generation,
           epoch_ms(suspected_at) AS fault_at, 'silent_corruption' AS failure_class,
           sdc_detail AS detail, sdc.*
    FROM sdc WHERE NOT EXISTS (SELECT 1 FROM failures f WHERE f.run_id = getvariable('run_id')
                                 AND f.generation = sdc.sdc_generation)
)
ORDER BY sort_at;

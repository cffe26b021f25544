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
-- log_path and stderr_tail: the failed worker's output file (on its node) and
-- its last lines, as FailureClassified v2 carries them ('' before v2).
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
           (SELECT min(generation) FROM gens g WHERE g.generation > f.generation) AS next_gen
    FROM failures f WHERE f.run_id = getvariable('run_id')
),
g AS (
    SELECT f.*,
           least(f.occurred_at, coalesce(f.exited_at, f.last_step_at,
                 (SELECT started_at FROM gens WHERE generation = f.generation))) AS fault_at,
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
)
SELECT
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
    stderr_tail
FROM h
ORDER BY occurred_at;

-- Timeline: the marks of a run's life, in seconds since its admission (since its
-- submission while it waits for admission), one row per mark, for the HTML
-- report's chart (`runledger report`) or any plot:
--   generation  a band [t_s, t_end_s) from GenerationStarted to the next
--               generation's start (or the run's end); label: why it started
--   step        a committed step at its end; lost: a later generation redid it
--   checkpoint  a committed manifest at its commit; lost: revoked since
--   failure     a fault (the first abnormal WorkerExited of the generation, else
--               its last step), t_end_s its classification; label: the class
--   recovery    from the fault to the first step of the next generation (the
--               RTO of the incidents query), step: the step it resumed from;
--               t_end_s is NULL when no later generation trained
--   end         RunFinished or RunCancelled; label: the outcome
-- The run's end (t_s of `end`, else its latest fact) closes the last band, as in
-- the ettr query, so the chart's width is the allocation.
--
-- The run's span, its generations (with their resume steps) and its steps (with
-- their lost flags) are spans.sql's, as the ettr, goodput and curves queries read them.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/spans.sql
--             .read queries/timeline.sql
WITH
bounds AS (
    -- t = 0 at admission (at the first fact while the run waits for it); z: its end
    SELECT coalesce(admitted_at, first_at) AS a, ended_at AS z
    FROM run_span(getvariable('run_id'))
),
gens AS (
    SELECT * FROM generation_spans(getvariable('run_id'))
),
steps_ AS (
    SELECT * FROM step_spans(getvariable('run_id'))
),
faults AS (
    SELECT f.generation, f.occurred_at AS classified, f.failure_class, f.signature, f.action,
           least(f.occurred_at, coalesce(
               (SELECT min(x.occurred_at) FROM exits x
                WHERE x.run_id = f.run_id AND x.generation = f.generation
                  AND (x.signal IS NOT NULL OR x.exit_code <> 0)),
               (SELECT max(ended_at) FROM steps_ WHERE generation = f.generation),
               (SELECT started_at FROM gens WHERE generation = f.generation))) AS fault_at,
           (SELECT min(g.generation) FROM gens g WHERE g.generation > f.generation) AS next_gen,
           (SELECT max(step) FROM steps_ WHERE generation = f.generation) AS last_step
    FROM failures f WHERE f.run_id = getvariable('run_id')
),
marks(kind, generation, t, t_end, step, lost, label) AS (
    SELECT 'generation', generation, started_at,
           coalesce(next_started_at, (SELECT z FROM bounds)),
           resume_step, false, reason
    FROM gens
    UNION ALL
    SELECT 'step', generation, ended_at, NULL, step, lost, NULL FROM steps_
    UNION ALL
    SELECT 'checkpoint', c.generation, c.committed_at, NULL, c.step,
           EXISTS (SELECT 1 FROM revocations r WHERE r.run_id = c.run_id
                   AND r.manifest_digest = c.manifest_digest),
           c.manifest_digest
    FROM checkpoints c WHERE c.run_id = getvariable('run_id')
    UNION ALL
    SELECT 'failure', generation, fault_at, classified, last_step, false,
           failure_class || ' ' || signature || ' -> ' || action
    FROM faults
    UNION ALL
    SELECT 'recovery', f.generation, f.fault_at,
           (SELECT min(started_at) FROM steps_ s WHERE s.generation = f.next_gen),
           (SELECT resume_step FROM gens g WHERE g.generation = f.next_gen), false,
           'g' || f.generation || ' -> g' || coalesce(CAST(f.next_gen AS VARCHAR), '?')
    FROM faults f
    UNION ALL
    SELECT 'end', generation, occurred_at, NULL, NULL, false, outcome
    FROM endings WHERE run_id = getvariable('run_id')
)
SELECT
    m.kind, m.generation,
    round((m.t - b.a) / 1000.0, 3) AS t_s,
    round((m.t_end - b.a) / 1000.0, 3) AS t_end_s,
    m.step, m.lost, m.label
FROM marks m, bounds b
ORDER BY m.t, CASE m.kind WHEN 'generation' THEN 0 WHEN 'step' THEN 1 WHEN 'failure' THEN 2
                    ELSE 3 END, m.step;

-- Curves: every committed step's loss and step time, in step order per generation,
-- for the report's loss and step-time charts (`runledger report`) or any plot.
--   loss          what the coordinator reported for the step (NULL: none given)
--   step_time_ms  the coordinator's wall time for the step
--   lost          a later generation redid the step (as the timeline and goodput
--                 queries judge it: its resume step, or the step before its first
--                 step when a restore fell back further)
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/curves.sql
WITH
gens AS (
    SELECT g.generation,
           least(coalesce(g.resume_step, 0),
                 coalesce((SELECT min(s.step) - 1 FROM steps s WHERE s.run_id = g.run_id
                             AND s.generation = g.generation), coalesce(g.resume_step, 0)))
               AS resume_step
    FROM generations g WHERE g.run_id = getvariable('run_id')
)
SELECT s.generation, s.step, s.loss, s.step_time_ms, s.input_wait_ms,
       EXISTS (SELECT 1 FROM gens g WHERE g.generation > s.generation
               AND g.resume_step < s.step) AS lost
FROM steps s
WHERE s.run_id = getvariable('run_id')
ORDER BY s.generation, s.step;

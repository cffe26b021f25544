-- Curves: every committed step's loss and step time, in step order per generation,
-- for the report's loss and step-time charts (`runledger report`) or any plot.
--   loss          what the coordinator reported for the step (NULL: none given)
--   step_time_ms  the coordinator's wall time for the step
--   lost          a later generation redid the step (its resume step, or the step
--                 before its first step when a restore fell back further), as the
--                 timeline, goodput and ettr queries judge it: spans.sql's step_spans
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/spans.sql
--             .read queries/curves.sql
SELECT generation, step, loss, step_time_ms, input_wait_ms, lost
FROM step_spans(getvariable('run_id'))
ORDER BY generation, step;

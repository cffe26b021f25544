-- Stragglers: per-rank step-time distributions (from each rank's own
-- StepTimesRecorded reports) in the run's latest generation that reported any,
-- and the ranks whose median is more than straggler_ratio (default 1.5) times
-- the median of the other ranks' medians (with two ranks, the other one's).
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; SET VARIABLE straggler_ratio = 1.5;
--             .read queries/stragglers.sql
WITH
latest AS (
    SELECT max(generation) AS generation FROM rank_steps WHERE run_id = getvariable('run_id')
),
per_rank AS (
    SELECT r.generation, r.logical_id, any_value(r.node) AS node, count(*) AS steps,
           quantile_cont(r.step_time_ms, 0.5) AS p50_ms,
           quantile_cont(r.step_time_ms, 0.99) AS p99_ms,
           max(r.step_time_ms) AS max_ms,
           sum(r.input_wait_ms) / nullif(sum(r.step_time_ms), 0) AS input_wait_share
    FROM rank_steps r JOIN latest USING (generation)
    WHERE r.run_id = getvariable('run_id')
    GROUP BY r.generation, r.logical_id
),
typical AS (
    SELECT a.logical_id, median(b.p50_ms) AS others_p50
    FROM per_rank a JOIN per_rank b ON b.logical_id <> a.logical_id
    GROUP BY a.logical_id
)
SELECT
    generation, logical_id AS member, node, steps,
    round(p50_ms, 2) AS p50_ms, round(p99_ms, 2) AS p99_ms, round(max_ms, 2) AS max_ms,
    round(input_wait_share, 4) AS input_wait_share,
    round(p50_ms / nullif(t.others_p50, 0), 3) AS vs_others,
    coalesce(p50_ms > coalesce(TRY_CAST(getvariable('straggler_ratio') AS DOUBLE), 1.5)
                      * t.others_p50, false) AS straggler
FROM per_rank LEFT JOIN typical t USING (logical_id)
ORDER BY p50_ms DESC, logical_id;

-- Goodput: accepted loss-bearing tokens per end-to-end second, and the cost per
-- accepted token when the spec gives budget.price_per_gpu_hour.
--
-- Accepted tokens are those of steps no later generation redid (a restart from
-- step r discards every step after r of the generations before it; r is the
-- generation's resume_step, or the step before its first step when that is
-- earlier: a restore that fell back to an older checkpoint). End to end
-- runs from submission to the run's end (or its latest event while it lives);
-- GPU hours are the world size times the allocated time (admission to end): the
-- unit budget.price_per_gpu_hour prices, whatever the devices were; devices names
-- them, from the ranks' own step times ('2 x cpu', '8 x cuda: <name>'; NULL when
-- no rank said, as StepTimesRecorded v1 writers do not).
--
-- Which steps were redone (step_spans.lost) and the run's span are spans.sql's.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/spans.sql
--             .read queries/goodput.sql
WITH
run AS (
    SELECT r.world_size, r.submitted_at,
           TRY_CAST(json_extract(json_extract_string(e.payload, '$.spec_json'),
                                 '$.budget.price_per_gpu_hour') AS DOUBLE) AS price
    FROM runs r JOIN events e ON e.topic = r.topic AND e.part = r.part AND e.ofs = r.ofs
    WHERE r.run_id = getvariable('run_id')
),
accepted AS (
    SELECT count(*) AS steps, coalesce(sum(tokens), 0) AS tokens,
           coalesce(sum(loss_tokens), 0) AS loss_tokens
    FROM step_spans(getvariable('run_id')) WHERE NOT lost
),
devs AS (
    SELECT string_agg(n || ' x ' || device, ', ' ORDER BY device) AS devices
    FROM (SELECT device, count(DISTINCT logical_id) AS n FROM rank_steps
          WHERE run_id = getvariable('run_id') AND device IS NOT NULL GROUP BY device)
),
all_steps AS (
    SELECT coalesce(sum(loss_tokens), 0) AS loss_tokens FROM step_spans(getvariable('run_id'))
)
SELECT
    a.steps AS accepted_steps,
    a.tokens AS accepted_tokens,
    a.loss_tokens AS accepted_loss_tokens,
    all_steps.loss_tokens - a.loss_tokens AS discarded_loss_tokens,
    round((b.ended_at - run.submitted_at) / 1000.0, 3) AS end_to_end_s,
    round(a.loss_tokens / nullif((b.ended_at - run.submitted_at) / 1000.0, 0), 1)
        AS loss_tokens_per_s,
    round(run.world_size * (b.ended_at - b.admitted_at) / 3600000.0, 6) AS gpu_hours,
    devs.devices,
    run.price AS price_per_gpu_hour,
    run.price * run.world_size * (b.ended_at - b.admitted_at) / 3600000.0
        / nullif(a.loss_tokens, 0) AS cost_per_loss_token
FROM accepted a, all_steps, run_span(getvariable('run_id')) b, run, devs;

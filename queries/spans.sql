-- Spans: the table macros several queries share, so each says a run's span, its
-- generations and its steps (and which steps a later generation redid) the same
-- way. Not a query: queries.runner puts this file before every query it runs
-- (TEMP macros, per connection: a read-only projection takes them too).
--   run_span(rid)          one row: admitted_at (the first RunAdmitted; NULL
--                          before admission), first_at (the run's first fact)
--                          and ended_at (RunFinished or RunCancelled; for a
--                          live run, its latest fact), from runledger.runs
--   generation_spans(rid)  one row per generation: generation, started_at,
--                          reason, next_started_at (the next generation's
--                          start; NULL for the last) and resume_step: the
--                          step it resumed from, or the step before its first
--                          step when that is earlier (a restore that fell back
--                          to an older checkpoint); 0 when it resumed from none
--   step_spans(rid)        one row per committed step: generation, step,
--                          started_at (its end less its step time), ended_at
--                          (StepCommitted's occurred_at), step_time_ms,
--                          input_wait_ms, loss, tokens, loss_tokens, and lost:
--                          a later generation resumed before it (redid it)
-- Times are the events' occurred_at (writers' clocks, in ms).
--
-- DuckDB CLI: .read queries/spans.sql before a query that uses them.
CREATE OR REPLACE TEMP MACRO run_span(rid) AS TABLE
    SELECT
        min(occurred_at) FILTER (WHERE event_type = 'RunAdmitted') AS admitted_at,
        min(occurred_at) AS first_at,
        coalesce(max(occurred_at) FILTER (WHERE event_type IN ('RunFinished', 'RunCancelled')),
                 max(occurred_at)) AS ended_at
    FROM events
    WHERE run_id = rid AND topic = 'runledger.runs';

CREATE OR REPLACE TEMP MACRO generation_spans(rid) AS TABLE
    SELECT g.generation, g.started_at, g.reason,
           least(coalesce(g.resume_step, 0),
                 coalesce((SELECT min(s.step) - 1 FROM steps s WHERE s.run_id = g.run_id
                             AND s.generation = g.generation), coalesce(g.resume_step, 0)))
               AS resume_step,
           lead(g.started_at) OVER (ORDER BY g.generation) AS next_started_at
    FROM generations g WHERE g.run_id = rid;

CREATE OR REPLACE TEMP MACRO step_spans(rid) AS TABLE
    SELECT s.generation, s.step, s.occurred_at - s.step_time_ms AS started_at,
           s.occurred_at AS ended_at, s.step_time_ms, s.input_wait_ms, s.loss, s.tokens,
           s.loss_tokens,
           EXISTS (SELECT 1 FROM generation_spans(rid) g WHERE g.generation > s.generation
                   AND g.resume_step < s.step) AS lost
    FROM steps s WHERE s.run_id = rid;

-- ETTR: effective training time ratio, T_productive / T_allocated, with every
-- millisecond of the allocation assigned to exactly one part.
--
-- Allocated time runs from the run's admission to its end (RunFinished or
-- RunCancelled; for a live run, its latest event). Each part is a set of
-- intervals built from the log; an instant covered by several takes the part of
-- highest precedence, and an instant covered by none is "other", so the parts
-- always sum to the allocation. Precedence, highest first:
--   detection    a failure happened and was not yet classified: from the fault
--                (the first abnormal WorkerExited of the generation, else its
--                last step; for a lost node, NodeLost.last_seen_at, its last
--                report, but not before the generation's last step, which every
--                rank took part in) to FailureClassified;
--   recovery     from FailureClassified to the first step of the next
--                generation (stop, backoff, relaunch, rendezvous, restore);
--   checkpoint   the training loop blocked on a checkpoint (CheckpointStaged.stall_ms);
--   lost_work    steps a later generation had to redo (after its resume step);
--   input_stall  the input-wait part of surviving steps;
--   productive   the rest of surviving steps;
--   idle         allocated but not training: the first launch, and the tail
--                after the last step;
--   resize_stop, resize_rendezvous, resize_restore
--                a planned elastic resize (a generation started with reason grow
--                or shrink while its predecessor had no failure): from the old
--                generation's last step to the new GenerationStarted (the
--                decision at the checkpoint boundary), from there to its
--                MembershipConfirmed (the old workers stopped, the new launched,
--                every member joined), and from there to its first step (the
--                restore, the data plane's resume). Its replayed steps are
--                lost_work; a resize after a failure is detection and recovery;
--   other        anything else (between steps: logging, reporting, the loop).
-- Times come from the events' occurred_at (writers' clocks, in ms).
--
-- The run's span, its generations' resume steps and its steps' lost flags are
-- spans.sql's (the macros the timeline, goodput and curves queries read too).
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/spans.sql
--             .read queries/ettr.sql
WITH
bounds AS (
    -- the allocation, [a, z): admission to the end
    SELECT admitted_at AS a, ended_at AS z FROM run_span(getvariable('run_id'))
),
gens AS (
    SELECT * FROM generation_spans(getvariable('run_id'))
),
step_iv AS (
    -- each step as an interval [b, e) with its input wait w, as iv below names intervals
    SELECT generation, step, ended_at AS e, started_at AS b, input_wait_ms AS w, lost
    FROM step_spans(getvariable('run_id'))
),
first_step AS (
    SELECT generation, min(b) AS b, max(e) AS e FROM step_iv GROUP BY generation
),
lost AS (  -- per generation, its lost node's last report (the earliest, if several)
    SELECT generation, min(last_seen_at) AS seen FROM lost_nodes
    WHERE run_id = getvariable('run_id') GROUP BY generation
),
resizes AS (
    -- a planned resize: the old generation's last step (its start if none), the new
    -- one's start, its MembershipConfirmed and its first step (or the next start)
    SELECT coalesce(p.e, g.prev_start) AS stopped, g.started_at,
           coalesce((SELECT min(x.occurred_at) FROM events x
                     WHERE x.run_id = getvariable('run_id') AND x.topic = 'runledger.runs'
                       AND x.event_type = 'MembershipConfirmed'
                       AND x.generation = g.generation), fs.b, g.next_started_at) AS joined,
           coalesce(fs.b, g.next_started_at) AS stepped
    FROM (SELECT *, lag(generation) OVER w AS prev, lag(started_at) OVER w AS prev_start
          FROM gens WINDOW w AS (ORDER BY generation)) g
    LEFT JOIN first_step p ON p.generation = g.prev
    LEFT JOIN first_step fs ON fs.generation = g.generation
    WHERE g.reason IN ('grow', 'shrink') AND g.prev IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM failures f WHERE f.run_id = getvariable('run_id')
                        AND f.generation = g.prev)
),
faults AS (
    SELECT f.generation, f.occurred_at AS classified,
           least(f.occurred_at, coalesce(
               (SELECT min(x.occurred_at) FROM exits x
                WHERE x.run_id = f.run_id AND x.generation = f.generation
                  AND (x.signal IS NOT NULL OR x.exit_code <> 0)),
               (SELECT max(e) FROM step_iv WHERE generation = f.generation),
               (SELECT started_at FROM gens WHERE generation = f.generation)),
               (SELECT greatest(l.seen, coalesce(
                         (SELECT max(e) FROM step_iv WHERE generation = f.generation),
                         (SELECT started_at FROM gens WHERE generation = f.generation)))
                FROM lost l WHERE l.generation = f.generation)) AS fault_at,
           (SELECT min(fs.b) FROM first_step fs WHERE fs.generation > f.generation) AS resumed
    FROM failures f WHERE f.run_id = getvariable('run_id')
),
iv(part, prio, b, e) AS (
    SELECT 'detection', 1, fault_at, classified FROM faults
    UNION ALL
    SELECT 'recovery', 2, classified, resumed FROM faults WHERE resumed IS NOT NULL
    UNION ALL
    SELECT 'checkpoint', 3, occurred_at - stall_ms, occurred_at
    FROM staging WHERE run_id = getvariable('run_id')
    UNION ALL
    SELECT 'lost_work', 4, b, e FROM step_iv WHERE lost
    UNION ALL
    SELECT 'input_stall', 5, b, b + w FROM step_iv WHERE NOT lost
    UNION ALL
    SELECT 'productive', 6, b + w, e FROM step_iv WHERE NOT lost
    UNION ALL
    SELECT 'idle', 7, g.started_at, fs.b FROM gens g JOIN first_step fs USING (generation)
    WHERE g.generation = (SELECT min(generation) FROM gens)
    UNION ALL
    SELECT 'idle', 7, (SELECT max(e) FROM step_iv), (SELECT z FROM bounds)
    WHERE NOT EXISTS (SELECT 1 FROM faults WHERE classified >= (SELECT max(e) FROM step_iv))
    UNION ALL
    SELECT 'resize_stop', 8, stopped, started_at FROM resizes
    UNION ALL
    SELECT 'resize_rendezvous', 9, started_at, joined FROM resizes WHERE joined IS NOT NULL
    UNION ALL  -- a generation that never joined nor stepped (the run ended): no such part
    SELECT 'resize_restore', 10, joined, stepped FROM resizes WHERE stepped IS NOT NULL
),
clipped AS (
    SELECT part, prio, greatest(iv.b, bounds.a) AS b, least(iv.e, bounds.z) AS e
    FROM iv, bounds
    WHERE least(iv.e, bounds.z) > greatest(iv.b, bounds.a)
),
-- A sweep instead of a range join: each interval adds +1 to its part's count at
-- its start and -1 at its end; between two consecutive boundaries the counts
-- are constant, and the piece goes to the first part (in precedence) counted.
deltas AS (
    SELECT b AS t, part, 1 AS d FROM clipped
    UNION ALL SELECT e, part, -1 FROM clipped
    UNION ALL SELECT a, 'other', 0 FROM bounds
    UNION ALL SELECT z, 'other', 0 FROM bounds
),
points AS (
    SELECT t,
           sum(d) FILTER (WHERE part = 'detection') AS detection,
           sum(d) FILTER (WHERE part = 'recovery') AS recovery,
           sum(d) FILTER (WHERE part = 'checkpoint') AS checkpoint,
           sum(d) FILTER (WHERE part = 'lost_work') AS lost_work,
           sum(d) FILTER (WHERE part = 'input_stall') AS input_stall,
           sum(d) FILTER (WHERE part = 'productive') AS productive,
           sum(d) FILTER (WHERE part = 'idle') AS idle,
           sum(d) FILTER (WHERE part = 'resize_stop') AS resize_stop,
           sum(d) FILTER (WHERE part = 'resize_rendezvous') AS resize_rendezvous,
           sum(d) FILTER (WHERE part = 'resize_restore') AS resize_restore
    FROM deltas GROUP BY t
),
running AS (
    SELECT t AS b, lead(t) OVER w AS e,
           sum(coalesce(detection, 0)) OVER w AS detection,
           sum(coalesce(recovery, 0)) OVER w AS recovery,
           sum(coalesce(checkpoint, 0)) OVER w AS checkpoint,
           sum(coalesce(lost_work, 0)) OVER w AS lost_work,
           sum(coalesce(input_stall, 0)) OVER w AS input_stall,
           sum(coalesce(productive, 0)) OVER w AS productive,
           sum(coalesce(idle, 0)) OVER w AS idle,
           sum(coalesce(resize_stop, 0)) OVER w AS resize_stop,
           sum(coalesce(resize_rendezvous, 0)) OVER w AS resize_rendezvous,
           sum(coalesce(resize_restore, 0)) OVER w AS resize_restore
    FROM points
    WINDOW w AS (ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
labelled AS (
    SELECT b, e, CASE
        WHEN detection > 0 THEN 'detection' WHEN recovery > 0 THEN 'recovery'
        WHEN checkpoint > 0 THEN 'checkpoint' WHEN lost_work > 0 THEN 'lost_work'
        WHEN input_stall > 0 THEN 'input_stall' WHEN productive > 0 THEN 'productive'
        WHEN idle > 0 THEN 'idle' WHEN resize_stop > 0 THEN 'resize_stop'
        WHEN resize_rendezvous > 0 THEN 'resize_rendezvous'
        WHEN resize_restore > 0 THEN 'resize_restore' ELSE 'other' END AS part
    FROM running WHERE e IS NOT NULL AND e > b
),
parts(part, ord) AS (
    VALUES ('productive', 1), ('checkpoint', 2), ('lost_work', 3), ('detection', 4),
           ('recovery', 5), ('input_stall', 6), ('idle', 7), ('resize_stop', 8),
           ('resize_rendezvous', 9), ('resize_restore', 10), ('other', 11)
),
totals AS (
    SELECT p.part, p.ord, coalesce(sum(l.e - l.b), 0) / 1000.0 AS seconds
    FROM parts p LEFT JOIN labelled l USING (part) GROUP BY p.part, p.ord
),
alloc AS (SELECT (z - a) / 1000.0 AS seconds FROM bounds WHERE a IS NOT NULL)
SELECT part, seconds, share FROM (
    SELECT part, ord, round(seconds, 3) AS seconds,
           round(seconds / nullif((SELECT seconds FROM alloc), 0), 4) AS share
    FROM totals WHERE (SELECT count(*) FROM alloc) > 0
    UNION ALL
    SELECT 'allocated', 0, round(seconds, 3), 1.0 FROM alloc
)
ORDER BY ord;

-- Mixture: per committed cursor and source, the count served (in the mixture's
-- unit) against the target share of all sources' counts, and the drift.
-- A CursorAdvanced is written only with a committed checkpoint, so these are the
-- counts of data the saved weights were trained on.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/mixture.sql
WITH c AS (
    SELECT u.generation, u.step, u.position, sc.source, sc.count, sc.target,
           sum(sc.count) OVER (PARTITION BY sc.topic, sc.part, sc.ofs) AS total
    FROM cursors u
    JOIN source_counts sc ON sc.topic = u.topic AND sc.part = u.part AND sc.ofs = u.ofs
    WHERE u.run_id = getvariable('run_id')
)
SELECT
    generation, step, position, source, count,
    round(count / nullif(total, 0), 6) AS share,
    target,
    round(target * total, 3) AS target_count,
    round(count - target * total, 3) AS drift,
    round(abs(count - target * total) / nullif(total, 0), 6) AS drift_share
FROM c
ORDER BY step, source;

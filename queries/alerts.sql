-- Alerts of a run: each AlertRaised with its resolution (if any), newest first.
--
-- DuckDB CLI: SET VARIABLE run_id = '<run>'; .read queries/alerts.sql
SELECT
    epoch_ms(a.occurred_at) AS raised_at,
    a.alert, a.subject, a.severity, a.owner,
    a.threshold, a.value, a.detail,
    epoch_ms(r.occurred_at) AS resolved_at,
    round((r.occurred_at - a.occurred_at) / 1000.0, 3) AS open_s,
    r.detail AS resolution,
    a.runbook, a.event_id
FROM alerts a
LEFT JOIN alert_resolutions r ON r.run_id = a.run_id AND r.raised_event_id = a.event_id
WHERE a.run_id = getvariable('run_id')
ORDER BY a.occurred_at DESC, a.alert, a.subject;

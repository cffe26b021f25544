"""queries: the questions people ask of the DuckDB projection, as ``.sql`` files.

- ``*.sql``: one query each (ettr, goodput, provenance, audit, incidents,
  recovery, stragglers, alerts, mixture, timeline). Each reads its run from
  ``getvariable('run_id')``, so it also runs in the DuckDB CLI after
  ``SET VARIABLE run_id = '...'`` and ``.read queries/spans.sql``.
- ``spans.sql``: not a query: the table macros of a run's, its generations' and
  its steps' spans that ettr, goodput, timeline and curves share (``runner``
  reads it before each query).
- ``source``: which file a reader opens (the live projection, or a running
  projector's snapshot) and how far behind the log it is.
- ``runner``: finds the files, checks the query name and the run, runs them.
- ``ettr``: the ETTR breakdown as a typed result.
- ``recovery``: RPO and RTO per failure domain over time, ``recovery.sql``'s facts
  folded through ``events.recovery`` (what ``runledger query recovery`` shows).
- ``lineage``: provenance as W3C PROV-JSON and as an OpenLineage run event.
- ``consumed``: what the provenance chain says the run consumed, each part known or
  why not (a job with its own loader records a dataset id, no positions).
- ``render``: results as aligned text for a terminal.
- ``report`` (with ``report_sections``, ``report_html``, ``report_svg``,
  ``report_sdc`` and ``timeline.sql``): the self-contained HTML postmortem of a
  run, and its text form.
- ``errors``: ``QueryError``, the package's root exception.
"""

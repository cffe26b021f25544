"""The provenance exports read back by the libraries their consumers use, strictly.

``run_event`` rebuilds an OpenLineage document with ``openlineage-python``'s own
classes (``event_v2``, ``facet_v2``): every field goes through their
constructors and validators (event type, RFC 3339 time, UUID run id, URIs; a
standard facet's required fields), and ``Serde`` writes it back, which must give
the document again: nothing lost, nothing renamed, and no null (``Serde`` drops
them). ``prov_document`` loads PROV-JSON with ``prov`` under
``warnings.simplefilter("error")``: a warning (a null attribute, which prov 3.2
drops with a ``ProvFutureRejectionWarning`` and its next release rejects)
fails the load. ``own_loader`` and ``end_as`` turn a hand-timed log into one of
the README's own job (checkpoints committed, through the controller's own
``commit_events``, from proposals without a data cursor) and end it otherwise.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from openlineage.client import event_v2 as ol
from openlineage.client.facet_v2 import (
    DatasetFacet,
    InputDatasetFacet,
    JobFacet,
    OutputDatasetFacet,
    RunFacet,
    dataset_version_dataset,
    error_message_run,
)
from openlineage.client.serde import Serde
from prov.model import ProvDocument

from controller.checkpoints import commit_events
from events.model import CursorAdvanced, ManifestCommitted, RunFinished
from queries.lineage import DATASET_VERSION_SCHEMA, ERROR_MESSAGE_SCHEMA
from tests.queries.timeline import Timeline

# The standard facets the export writes, by the schema URL their class declares.
STANDARD: dict[str, type[Any]] = {
    ERROR_MESSAGE_SCHEMA: error_message_run.ErrorMessageRunFacet,
    DATASET_VERSION_SCHEMA: dataset_version_dataset.DatasetVersionDatasetFacet,
}


def _facet(base: type[Any], doc: dict[str, Any]) -> Any:
    fields = {k: v for k, v in doc.items() if k not in ("_producer", "_schemaURL")}
    standard = STANDARD.get(doc["_schemaURL"])
    if standard is not None:
        assert issubclass(standard, base), (standard, base)
        return standard(producer=doc["_producer"], **fields)  # unknown/missing: TypeError
    url = doc["_schemaURL"]
    custom = type(base.__name__, (base,), {"_get_schema": staticmethod(lambda: url)})
    return custom(producer=doc["_producer"]).with_additional_properties(**fields)


def _facets(base: type[Any], doc: dict[str, Any] | None) -> dict[str, Any]:
    return {name: _facet(base, f) for name, f in (doc or {}).items()}


def run_event(doc: dict[str, Any]) -> ol.RunEvent:
    """``doc`` as openlineage-python's RunEvent; fails unless it round-trips exactly."""
    known = {"eventType", "eventTime", "producer", "schemaURL", "run", "job", "inputs",
             "outputs"}
    assert set(doc) <= known, set(doc) - known
    event = ol.RunEvent(
        eventType=ol.RunState(doc["eventType"]), eventTime=doc["eventTime"],
        producer=doc["producer"],
        run=ol.Run(runId=doc["run"]["runId"], facets=_facets(RunFacet, doc["run"].get("facets"))),
        job=ol.Job(namespace=doc["job"]["namespace"], name=doc["job"]["name"],
                   facets=_facets(JobFacet, doc["job"].get("facets"))),
        inputs=[ol.InputDataset(namespace=d["namespace"], name=d["name"],
                                facets=_facets(DatasetFacet, d.get("facets")),
                                inputFacets=_facets(InputDatasetFacet, d.get("inputFacets")))
                for d in doc.get("inputs", [])],
        outputs=[ol.OutputDataset(namespace=d["namespace"], name=d["name"],
                                  facets=_facets(DatasetFacet, d.get("facets")),
                                  outputFacets=_facets(OutputDatasetFacet,
                                                       d.get("outputFacets")))
                 for d in doc.get("outputs", [])])
    again = _drop_empty_maps(json.loads(Serde.to_json(event)))
    assert again == doc, "openlineage-python does not write back the document"
    return event


def _drop_empty_maps(value: Any) -> Any:
    """The client classes default an absent facet map to {}, which Serde writes out."""
    if isinstance(value, dict):
        return {k: _drop_empty_maps(v) for k, v in value.items() if v != {}}
    if isinstance(value, list):
        return [_drop_empty_maps(v) for v in value]
    return value


def prov_document(text: str) -> ProvDocument:
    """PROV-JSON loaded by ``prov`` with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ProvDocument.deserialize(content=text, format="json")


def own_loader(tl: Timeline, *, keep_cursor_of: tuple[int, ...] = ()) -> None:
    """Re-commit every checkpoint of ``tl`` as the session proposes it without a loader
    of runledger's: the dataset id it was given, no epoch, position or counts."""
    out = []
    for e in tl.events:
        if isinstance(e, CursorAdvanced) and e.step not in keep_cursor_of:
            continue
        if isinstance(e, ManifestCommitted) and e.step not in keep_cursor_of:
            proposal = tl.ev.proposed(e.generation, e.step, dataset_id="sha256:d",
                                      manifest_path=e.manifest_path,
                                      manifest_digest=e.manifest_digest)
            header = e.header
            facts = commit_events(proposal, lambda _eid, _cause, h=header: h)
            assert [type(f) for f in facts] == [ManifestCommitted]  # and no cursor
            out.extend(facts)
            continue
        out.append(e)
    tl.events = out


def end_as(tl: Timeline, outcome: str) -> None:
    """End the run ``outcome`` (failed, cancelled) instead, or not at all (unfinished)."""
    last = tl.events.pop()
    assert isinstance(last, RunFinished)
    tl.ev.now = last.header.occurred_at
    if outcome == "failed":
        tl.add(tl.ev.finished(2, "failed", reason="worker_crash: restart budget spent"))
    elif outcome == "cancelled":
        tl.add(tl.ev.cancelled(2, reason="budget"))
    elif outcome == "succeeded":
        tl.add(last)

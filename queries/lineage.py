"""Provenance of a checkpoint as W3C PROV-JSON and as an OpenLineage run event.

Both are built from the ``provenance`` query's chain (the checkpoint and its
ancestors, JSON-ready rows) plus the dataset facts the catalog adds. Identifiers
are stable (no clock, no random): a checkpoint is its manifest digest, a
training segment is ``run/g<generation>/steps-<from>-<to>``, the OpenLineage
run id is a UUID5 of the runledger run id, so exporting twice gives the same
document.

What the log does not hold is left out, never written as null (``prov`` warns
about a null attribute and drops it; its next release rejects it): a job that
loads its own data has a dataset, the one it was submitted with, but no sample
positions nor per-source counts, so its segments ``used`` the dataset with
``positionsRecorded`` false and no range (``queries.consumed`` says why).

The OpenLineage event is the run's state: COMPLETE when it succeeded, FAIL
when it failed (with the standard ``errorMessage`` run facet: the reason it
ended on), ABORT when it was cancelled, RUNNING while it has not ended; its
``eventTime`` is the run's end, or while it runs the checkpoint's commit. The
input is the dataset, namespace ``runledger`` and name its manifest id (the
naming spec's ``scheme[://authority]`` with no authority: a manifest id is
content-addressed, the same wherever its catalog lives), with the standard
``version`` facet, the catalog's facts, and how the run consumed it as an
input facet.

Tested in tests/runledger/commands/test_query.py and tests/queries/test_consumed.py.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from queries import consumed

NS = "runledger"
DATASET_NS = "runledger"  # a content-addressed manifest id: no authority to name
PRODUCER = "https://github.com/runledger/runledger"
EVENT_TYPES = {"succeeded": "COMPLETE", "failed": "FAIL", "cancelled": "ABORT",
               "unfinished": "RUNNING"}
_OL_FACETS = "https://openlineage.io/spec/facets/1-0-1"
ERROR_MESSAGE_SCHEMA = f"{_OL_FACETS}/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
DATASET_VERSION_SCHEMA = (f"{_OL_FACETS}/DatasetVersionDatasetFacet.json"
                          "#/$defs/DatasetVersionDatasetFacet")
_PROV_NS = "https://runledger.dev/ns#"  # a prefix for our own terms, not fetched
_UUID_NS = uuid.UUID("6f0c8f7e-4c1b-5a39-9a2e-2f1d3c4b5a69")


def _segment(run_id: str, link: dict[str, Any]) -> str:
    return f"{NS}:{run_id}/g{link['generation']}/steps-{link['step_from']}-{link['step']}"


def utc(value: Any) -> str | None:
    """An RFC 3339 time with its offset: the projection keeps UTC without a zone,
    and both PROV (xsd:dateTime) and OpenLineage (date-time) want it explicit."""
    if value is None:
        return None
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.isoformat()


def _typed(value: Any) -> Any:
    """A PROV-JSON attribute value. A bare JSON list would be read as several values
    of one attribute (order and duplicates lost), and a bare object is no value at
    all, so both travel as a typed literal holding their JSON text."""
    if isinstance(value, list | dict):
        return {"$": json.dumps(value, sort_keys=True, separators=(",", ":")),
                "type": f"{NS}:json"}
    return value


def _qname(name: str) -> dict[str, str]:
    return {"$": name, "type": "prov:QUALIFIED_NAME"}


def _present(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes the log holds: an unknown one is left out, not written as null."""
    return {k: v for k, v in attrs.items() if v is not None}


def prov(run_id: str, chain: list[dict[str, Any]],
         dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """PROV-JSON: checkpoints and the dataset are entities, each segment of training
    between two checkpoints an activity that used the parent and the data."""
    doc: dict[str, dict[str, Any]] = {k: {} for k in (
        "entity", "activity", "agent", "used", "wasGeneratedBy", "wasDerivedFrom",
        "wasAssociatedWith")}
    doc["agent"][f"{NS}:run/{run_id}"] = {
        "prov:type": _qname("prov:SoftwareAgent"),
        f"{NS}:outcome": consumed.run_end(chain[0])["outcome"]}
    for link in chain:
        _prov_link(doc, run_id, link, dataset)
    return {"prefix": {NS: _PROV_NS}, **doc}


def _prov_link(doc: dict[str, dict[str, Any]], run_id: str, link: dict[str, Any],
               dataset: dict[str, Any] | None) -> None:
    ck, seg = f"{NS}:{link['manifest_digest']}", _segment(run_id, link)
    doc["entity"][ck] = _present({
        "prov:type": _qname(f"{NS}:Checkpoint"), f"{NS}:step": link["step"],
        f"{NS}:generation": link["generation"], f"{NS}:manifest": link["manifest_path"],
        f"{NS}:positionFrom": link.get("position_from"),
        f"{NS}:positionTo": link.get("position_to"),
        f"{NS}:sourceCounts": _typed(link.get("source_counts")),
        f"{NS}:codeVersion": link.get("code_version")})
    doc["activity"][seg] = _times(link) | {"prov:type": _qname(f"{NS}:TrainingSegment"),
                                           f"{NS}:stepFrom": link["step_from"],
                                           f"{NS}:stepTo": link["step"]}
    doc["wasGeneratedBy"][f"_:gen/{link['manifest_digest']}"] = {"prov:entity": ck,
                                                                  "prov:activity": seg}
    doc["wasAssociatedWith"][f"_:assoc/{seg}"] = {"prov:activity": seg,
                                                  "prov:agent": f"{NS}:run/{run_id}"}
    if link.get("dataset_id"):
        ds = f"{NS}:{link['dataset_id']}"
        doc["entity"].setdefault(ds, {"prov:type": _qname(f"{NS}:Dataset"),
                                      f"{NS}:recordedBy": link["dataset_from"],
                                      **_dataset_attrs(dataset)})
        span = consumed.segment_positions(link)
        doc["used"][f"_:used/{seg}/data"] = _present({
            "prov:activity": seg, "prov:entity": ds,
            f"{NS}:positionsRecorded": span["known"],
            f"{NS}:positionFrom": span.get("from"), f"{NS}:positionTo": span.get("to")})
    if link.get("parent_digest"):
        parent = f"{NS}:{link['parent_digest']}"
        doc["used"][f"_:used/{seg}/parent"] = {"prov:activity": seg, "prov:entity": parent}
        doc["wasDerivedFrom"][f"_:derived/{link['manifest_digest']}"] = {
            "prov:generatedEntity": ck, "prov:usedEntity": parent}


def _times(link: dict[str, Any]) -> dict[str, str]:
    """The segment's start (its parent's commit, or its generation's start) and end
    (its checkpoint's commit), where the projection knows them."""
    return _present({"prov:startTime": utc(link.get("started_at")),
                     "prov:endTime": utc(link.get("committed_at"))})


def _dataset_attrs(dataset: dict[str, Any] | None) -> dict[str, Any]:
    if not dataset:
        return {}
    return {f"{NS}:{k}": _typed(v) for k, v in dataset.items() if v is not None}


def _facet(producer: str, schema: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A runledger custom facet: its fields the log holds (none null)."""
    return {"_producer": producer, "_schemaURL": f"https://runledger.dev/facets/{schema}.json",
            **_present(fields)}


def openlineage(run_id: str, chain: list[dict[str, Any]],
                dataset: dict[str, Any] | None = None, *,
                producer: str = PRODUCER) -> dict[str, Any]:
    """An OpenLineage run event of the run's state: it read the dataset and wrote the
    checkpoint. Its time comes from the log (the run's end, else the checkpoint's
    commit), so the document does not depend on when it was exported."""
    head = chain[0]
    end = consumed.run_end(head)
    run_facets = {"runledger_run": _facet(producer, "run", {
        "runId": run_id, "outcome": end["outcome"], "codeVersion": head.get("code_version"),
        "endReason": end.get("reason")})}
    if end["outcome"] == "failed":
        run_facets["errorMessage"] = {
            "_producer": producer, "_schemaURL": ERROR_MESSAGE_SCHEMA,
            "message": end.get("reason") or "the run failed", "programmingLanguage": "python"}
    return {
        "eventType": EVENT_TYPES.get(end["outcome"], "OTHER"),
        "eventTime": utc(end.get("ended_at") or head["committed_at"]), "producer": producer,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": str(uuid.uuid5(_UUID_NS, run_id)), "facets": run_facets},
        "job": {"namespace": NS, "name": run_id},
        "inputs": _inputs(chain, dataset, producer),
        "outputs": [{"namespace": NS, "name": f"{run_id}/step-{head['step']}",
                     "facets": {"runledger_checkpoint": _facet(producer, "checkpoint", {
                         "manifest": head["manifest_path"], "digest": head["manifest_digest"],
                         "parent": head.get("parent_digest"), "step": head["step"],
                         "generation": head["generation"]})}}],
    }


def _inputs(chain: list[dict[str, Any]], dataset: dict[str, Any] | None,
            producer: str) -> list[dict[str, Any]]:
    """The dataset the run was given, with what the log says it consumed of it."""
    ds = consumed.dataset(chain[0])
    if not ds["known"]:
        return []
    facets: dict[str, Any] = {"version": {"_producer": producer,
                                          "_schemaURL": DATASET_VERSION_SCHEMA,
                                          "datasetVersion": ds["id"]}}
    if dataset:
        facets["runledger_dataset"] = _facet(producer, "dataset", dataset)
    segments = [{"generation": c["generation"], "steps": [c["step_from"], c["step"]],
                 "positions": consumed.segment_positions(c)} for c in chain]
    consumption = _facet(producer, "consumption", {
        "recordedBy": ds["recorded_by"], "positions": consumed.positions(chain),
        "sourceCounts": consumed.source_counts(chain[0]), "segments": segments})
    return [{"namespace": DATASET_NS, "name": ds["id"], "facets": facets,
             "inputFacets": {"runledger_consumption": consumption}}]

"""Provenance of a checkpoint as W3C PROV-JSON and as an OpenLineage run event.

Both are built from the ``provenance`` query's chain (the checkpoint and its
ancestors) plus the dataset facts the catalog adds. Identifiers are stable
(no clock, no random): a checkpoint is its manifest digest, a training segment
is ``run/g<generation>/steps-<from>-<to>``, the OpenLineage run id is a UUID5
of the runledger run id, so exporting twice gives the same document.

Tested in tests/runledger/commands/test_query.py.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

NS = "runledger"
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


def prov(run_id: str, chain: list[dict[str, Any]],
         dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """PROV-JSON: checkpoints and the dataset are entities, each segment of training
    between two checkpoints an activity that used the parent and the data."""
    entity: dict[str, Any] = {}
    activity: dict[str, Any] = {}
    used: dict[str, Any] = {}
    generated: dict[str, Any] = {}
    derived: dict[str, Any] = {}
    associated: dict[str, Any] = {}
    agent = {f"{NS}:run/{run_id}": {"prov:type": _qname("prov:SoftwareAgent")}}
    for link in chain:
        ck = f"{NS}:{link['manifest_digest']}"
        entity[ck] = {"prov:type": _qname(f"{NS}:Checkpoint"), f"{NS}:step": link["step"],
                      f"{NS}:generation": link["generation"],
                      f"{NS}:manifest": link["manifest_path"],
                      f"{NS}:positionFrom": link["position_from"],
                      f"{NS}:positionTo": link["position_to"],
                      f"{NS}:sourceCounts": _typed(link["source_counts"]),
                      f"{NS}:codeVersion": link["code_version"]}
        seg = _segment(run_id, link)
        activity[seg] = _times(link) | {"prov:type": _qname(f"{NS}:TrainingSegment"),
                                        f"{NS}:stepFrom": link["step_from"],
                                        f"{NS}:stepTo": link["step"]}
        generated[f"_:gen/{link['manifest_digest']}"] = {"prov:entity": ck, "prov:activity": seg}
        associated[f"_:assoc/{seg}"] = {"prov:activity": seg, "prov:agent": f"{NS}:run/{run_id}"}
        if link.get("dataset_id"):
            ds = f"{NS}:{link['dataset_id']}"
            entity.setdefault(ds, {"prov:type": _qname(f"{NS}:Dataset"),
                                   **_dataset_attrs(dataset)})
            used[f"_:used/{seg}/data"] = {"prov:activity": seg, "prov:entity": ds,
                                          f"{NS}:positionFrom": link["position_from"],
                                          f"{NS}:positionTo": link["position_to"]}
        if link.get("parent_digest"):
            parent = f"{NS}:{link['parent_digest']}"
            used[f"_:used/{seg}/parent"] = {"prov:activity": seg, "prov:entity": parent}
            derived[f"_:derived/{link['manifest_digest']}"] = {
                "prov:generatedEntity": ck, "prov:usedEntity": parent}
    return {"prefix": {NS: _PROV_NS}, "entity": entity, "activity": activity, "agent": agent,
            "used": used, "wasGeneratedBy": generated, "wasDerivedFrom": derived,
            "wasAssociatedWith": associated}


def _times(link: dict[str, Any]) -> dict[str, str]:
    """The segment's start (its parent's commit, or its generation's start) and end
    (its checkpoint's commit), where the projection knows them."""
    times = {"prov:startTime": utc(link.get("started_at")),
             "prov:endTime": utc(link.get("committed_at"))}
    return {k: v for k, v in times.items() if v is not None}


def _dataset_attrs(dataset: dict[str, Any] | None) -> dict[str, Any]:
    if not dataset:
        return {}
    return {f"{NS}:{k}": _typed(v) for k, v in dataset.items() if v is not None}


def openlineage(run_id: str, chain: list[dict[str, Any]],
                dataset: dict[str, Any] | None = None, *, event_time: str,
                producer: str = "https://github.com/runledger/runledger") -> dict[str, Any]:
    """An OpenLineage COMPLETE run event: the run read the dataset and wrote the checkpoint.

    ``event_time`` is the checkpoint's commit time (ISO 8601; UTC when it has no
    offset), given by the caller from the log, so the document does not depend on
    when it was exported.
    """
    head = chain[0]
    inputs = []
    if head.get("dataset_id"):
        ranges = [{"generation": c["generation"], "steps": [c["step_from"], c["step"]],
                   "positions": [c["position_from"], c["position_to"]]} for c in chain]
        inputs.append({
            "namespace": NS, "name": head["dataset_id"],
            "facets": {"runledger_consumption": {
                "_producer": producer,
                "_schemaURL": "https://runledger.dev/facets/consumption.json",
                "positions": [0, head["position_to"]], "segments": ranges,
                "sourceCounts": head["source_counts"], **(dataset or {})}}})
    outputs = [{"namespace": NS, "name": f"{run_id}/step-{head['step']}",
                "facets": {"runledger_checkpoint": {
                    "_producer": producer,
                    "_schemaURL": "https://runledger.dev/facets/checkpoint.json",
                    "manifest": head["manifest_path"], "digest": head["manifest_digest"],
                    "parent": head["parent_digest"], "step": head["step"],
                    "generation": head["generation"]}}}]
    return {
        "eventType": "COMPLETE", "eventTime": utc(event_time), "producer": producer,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": str(uuid.uuid5(_UUID_NS, run_id)),
                "facets": {"runledger_run": {"_producer": producer,
                                             "_schemaURL": "https://runledger.dev/facets/run.json",
                                             "runId": run_id,
                                             "codeVersion": head["code_version"]}}},
        "job": {"namespace": NS, "name": run_id},
        "inputs": inputs, "outputs": outputs,
    }

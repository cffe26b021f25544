"""Shared setup of the torch-worker scenarios: a synthetic corpus in a catalog, a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataplane.catalog import Catalog, build_manifest
from dataplane.synth import template, write_corpus
from tests.e2e.harness import PY, Cluster, spec

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py")


def dataset(cluster: Cluster, seq_len: int = 32) -> str:
    """Build the synthetic corpus into the cluster's catalog; the manifest id."""
    corpus = cluster.work / "corpus"
    write_corpus(str(corpus), seed=1)
    doc = template(str(corpus), seed=1)
    doc["packing"]["seq_len"] = seq_len
    catalog = cluster.work / "catalog"
    cluster.env["RUNLEDGER_DATASETS"] = str(catalog)
    return Catalog(str(catalog)).put(build_manifest(doc, str(corpus)))


def tiny_spec(cluster: Cluster, name: str, ds: str, *, steps: int = 20, interval: int = 5,
              model: dict[str, Any] | None = None, **checkpoint: Any) -> dict[str, Any]:
    return spec(
        name, [], command=[PY, EXAMPLE], dataset=ds,
        model={"steps": steps, "global_batch": 4, **(model or {})},
        heartbeat={"interval_s": 0.5, "timeout_s": 20.0, "stall_timeout_s": 60.0},
        checkpoint={"policy": "fixed", "interval_steps": interval,
                    "root": str(cluster.work / "ckpt"), **checkpoint},
    )

"""``runledger dataset ...`` through the real command tree, and alias resolution at submit.

No broker: the dataset commands never touch Kafka, and submit's resolution
happens before it connects. The one end-to-end submit is marked ``kafka``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from controller.errors import SpecError
from controller.spec import parse_spec
from dataplane.catalog import Catalog
from dataplane.errors import CatalogError
from runledger.cli import app
from runledger.commands.runs import resolve_spec_dataset

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "run.yaml"
EXAMPLE_ID = "sha256:5b1e1c0f4a7d2e9c8b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa"


def cli(*args: str, env: dict[str, str | None] | None = None) -> Result:
    base: dict[str, str | None] = {"RUNLEDGER_DATASETS": None, "RUNLEDGER_BOOTSTRAP": None}
    return CliRunner().invoke(app, list(args), env=base | (env or {}))


def one_line_error(result: Result) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("runledger: ")
    return line


@pytest.fixture
def built(tmp_path: Path) -> tuple[str, str, Path]:
    """A synthetic corpus built into a fresh catalog as corpus/latest: (catalog, id, template)."""
    out = cli("dataset", "synth", str(tmp_path / "corpus"), "--seed", "3")
    assert out.exit_code == 0, out.stderr
    template = Path(out.stdout.strip())
    assert template == tmp_path / "corpus" / "dataset.yaml"
    catalog = str(tmp_path / "cat")
    out = cli("dataset", "build", str(template), "--catalog", catalog, "--alias", "corpus/latest")
    assert out.exit_code == 0, out.stderr
    [mid] = out.stdout.split()
    return catalog, mid, template


def test_synth_build_show_resolve_list(built: tuple[str, str, Path]) -> None:
    catalog, mid, template = built
    doc = yaml.safe_load(template.read_text())
    assert doc["tokenizer"]["name"] == "synth" and doc["packing"] == {
        "mode": "concat", "seq_len": 128, "pad_id": 0}
    assert doc["mixture"]["weights"] == {"web": 0.5, "code": 0.3, "books": 0.2}
    assert doc["access"] == [str(template.parent)]

    again = cli("dataset", "build", str(template), "--json", env={"RUNLEDGER_DATASETS": catalog})
    assert again.exit_code == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["id"] == mid and report["name"] == "synth" and report["alias"] is None
    rows = {s["name"]: s for s in report["sources"]}
    assert rows["web"]["records"] == 3000 and rows["books"]["records"] == 40
    assert all(s["tokens"] > 0 and s["bytes"] > 0 for s in report["sources"])

    show = cli("dataset", "show", "corpus/latest", "--catalog", catalog)
    assert show.exit_code == 0, show.stderr
    assert show.stdout.splitlines()[0] == f"dataset    {mid}"
    assert "aliases    corpus/latest" in show.stdout
    rows = {line.split()[0]: line.split()[1:] for line in show.stdout.splitlines()}
    assert rows["web"][:2] == ["3", "3000"] and rows["web"][-1] == "0.5"
    assert rows["books"][:2] == ["2", "40"] and rows["books"][-1] == "0.2"
    for word in ("tokenizer  synth 1, vocab 512 eos 1", "packing    concat, seq_len 128",
                 "mixture    exact, unit samples, exhaustion repeat", "access "):
        assert word in show.stdout

    raw = cli("dataset", "show", mid, "--catalog", catalog, "--json")
    stored = Path(catalog) / "manifests" / f"{mid.removeprefix('sha256:')}.json"
    assert raw.stdout.rstrip("\n").encode() == stored.read_bytes()

    resolved = cli("dataset", "resolve", "corpus/latest", "--catalog", catalog)
    assert resolved.stdout == f"{mid}\n"
    assert cli("dataset", "alias", "corpus/stable", "corpus/latest", "--catalog",
               catalog).stdout == f"corpus/stable -> {mid}\n"

    listing = cli("dataset", "list", "--catalog", catalog)
    assert listing.exit_code == 0
    [row] = [line for line in listing.stdout.splitlines() if line.startswith(mid)]
    assert row.split()[1:3] == ["synth", "3"] and row.endswith("corpus/latest, corpus/stable")
    as_json = json.loads(cli("dataset", "list", "--catalog", catalog, "--json").stdout)
    assert as_json["aliases"] == {"corpus/latest": mid, "corpus/stable": mid}
    assert [m["id"] for m in as_json["manifests"]] == [mid]


def test_errors_are_one_line_and_exit_1(built: tuple[str, str, Path], tmp_path: Path) -> None:
    catalog, mid, _ = built
    line = one_line_error(cli("dataset", "show", "corpus/old", "--catalog", catalog))
    assert "unknown dataset alias 'corpus/old'" in line and "known aliases: corpus/latest" in line
    line = one_line_error(cli("dataset", "resolve", "../x", "--catalog", catalog))
    assert "not a dataset alias" in line
    line = one_line_error(cli("dataset", "alias", "x", "sha256:" + "0" * 64, "--catalog",
                              catalog))
    assert "holds 1 manifest " in line and "runledger dataset list" in line
    one_line_error(cli("dataset", "build", str(tmp_path / "nope.yaml"), "--catalog", catalog))

    stored = Path(catalog) / "manifests" / f"{mid.removeprefix('sha256:')}.json"
    stored.write_bytes(stored.read_bytes().replace(b'"seq_len":128', b'"seq_len":256'))
    assert "altered" in one_line_error(cli("dataset", "show", mid, "--catalog", catalog))
    listing = cli("dataset", "list", "--catalog", catalog)
    assert listing.exit_code == 1 and "DAMAGED" in listing.stdout
    assert listing.stderr.startswith("runledger: 1 stored manifest(s) are damaged")


def test_a_bad_template_names_every_problem(tmp_path: Path) -> None:
    out = cli("dataset", "synth", str(tmp_path / "c"))
    template = Path(out.stdout.strip())
    doc = yaml.safe_load(template.read_text())
    doc["sources"][0]["objects"] = ["web/*.parquet"]
    doc["access"] = [str(tmp_path / "c" / "code")]
    template.write_text(yaml.safe_dump(doc))
    bad = cli("dataset", "build", str(template), "--catalog", str(tmp_path / "cat"))
    assert bad.exit_code == 1 and bad.stdout == ""
    head, *problems = bad.stderr.splitlines()
    assert head == f"runledger: {template}: invalid dataset manifest, 3 problems:"
    assert "sources[web].objects[0] 'web/*.parquet': the glob matches no object" in problems[0]
    assert all("outside the access scope" in p for p in problems[1:])
    assert not (tmp_path / "cat").exists()


# --- alias resolution at submit ------------------------------------------------


def spec_text(dataset: str) -> str:
    text = EXAMPLE.read_text()
    assert text.count(EXAMPLE_ID) == 1
    return text.replace(EXAMPLE_ID, dataset)


def test_submit_resolution_substitutes_the_id(built: tuple[str, str, Path]) -> None:
    catalog, mid, _ = built
    store = Catalog(catalog)
    for written in ("corpus/latest", '"corpus/latest"', "'corpus/latest'"):
        text, alias = resolve_spec_dataset(spec_text(written), "run.yaml", store)
        assert alias == "corpus/latest"
        assert text == spec_text(mid)  # only the value changed: comments and all stay
        assert parse_spec(text, "run.yaml").dataset == mid


def test_submit_resolution_leaves_digests_alone_without_a_catalog(tmp_path: Path) -> None:
    nowhere = Catalog(str(tmp_path / "no-catalog"))
    text = spec_text(EXAMPLE_ID)
    assert resolve_spec_dataset(text, "run.yaml", nowhere) == (text, None)
    assert resolve_spec_dataset("a: [", "run.yaml", nowhere) == ("a: [", None)


def test_submit_resolution_checks_digests_where_a_catalog_exists(
    built: tuple[str, str, Path]
) -> None:
    catalog, mid, _ = built
    store = Catalog(catalog)
    assert resolve_spec_dataset(spec_text(mid), "run.yaml", store) == (spec_text(mid), None)
    with pytest.raises(CatalogError, match="unknown dataset manifest"):
        resolve_spec_dataset(spec_text(EXAMPLE_ID), "run.yaml", store)


def test_an_unknown_alias_is_a_spec_problem(built: tuple[str, str, Path]) -> None:
    catalog, _, _ = built
    store = Catalog(catalog)
    with pytest.raises(CatalogError, match="known aliases: corpus/latest"):
        resolve_spec_dataset(spec_text("corpus/old"), "run.yaml", store)
    bad = spec_text("corpus/old").replace("rpo_s: ", "rpo_s: -1 #", 1)
    with pytest.raises(SpecError) as info:
        resolve_spec_dataset(bad, "run.yaml", store)
    [dataset] = [p for p in info.value.problems if p.startswith("dataset:")]
    assert "aliases must be resolved first" in dataset and "unknown dataset alias" in dataset
    assert len(info.value.problems) == 2


def test_submit_prints_the_resolution_before_connecting(
    built: tuple[str, str, Path], tmp_path: Path
) -> None:
    catalog, mid, _ = built
    path = tmp_path / "run.yaml"
    path.write_text(spec_text("corpus/latest"))
    out = cli("submit", str(path), "--catalog", catalog, "--principal", "bob")
    assert out.exit_code == 1  # no broker configured: the failure comes after resolution
    first, second = out.stderr.splitlines()
    assert first == f"resolved corpus/latest -> {mid}"
    assert second.startswith("runledger: no Kafka bootstrap address")

    path.write_text(spec_text("corpus/old"))
    out = cli("submit", str(path), "--catalog", catalog)
    line = one_line_error(out)
    assert "unknown dataset alias 'corpus/old'" in line


@pytest.mark.kafka
def test_submit_records_the_resolved_id(
    bootstrap: str, unique: str, built: tuple[str, str, Path], tmp_path: Path
) -> None:
    from events.consume import read_log
    from events.model import RunSubmitted
    from events.topics import REQUESTS

    catalog, mid, _ = built
    doc = yaml.safe_load(spec_text("corpus/latest")) | {"name": unique[:63]}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap, "RUNLEDGER_DATASETS": catalog}
    out = subprocess.run([sys.executable, "-m", "runledger.cli", "submit", str(path), "--json"],
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == f"resolved corpus/latest -> {mid}\n"
    run_id = json.loads(out.stdout)["run_id"]
    [event] = [r.event for r in read_log(bootstrap, REQUESTS) if r.event.run_id == run_id]
    assert isinstance(event, RunSubmitted) and event.dataset_id == mid
    assert json.loads(event.spec_json)["dataset"] == mid

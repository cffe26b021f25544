"""``runledger dataset ...`` through the real command tree (no broker: it never touches Kafka).

Resolving a spec's dataset alias is tested with the spec (tests/controller/spec/test_runspec.py)
and with ``submit`` (tests/runledger/commands/test_runs.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from runledger.cli import app


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
    doc = json.loads(cli("dataset", "synth", str(tmp_path / "again"), "--json").stdout)
    assert doc == {"directory": str(tmp_path / "again"),
                   "template": str(tmp_path / "again" / "dataset.yaml"), "seed": 0}
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
    assert json.loads(cli("dataset", "resolve", "corpus/stable", "--catalog", catalog,
                          "--json").stdout) == {"ref": "corpus/stable", "manifest_id": mid}
    assert json.loads(cli("dataset", "alias", "corpus/stable", mid, "--catalog", catalog,
                          "--json").stdout) == {"alias": "corpus/stable", "manifest_id": mid,
                                                "previous": mid}

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

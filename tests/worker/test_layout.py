"""worker/layout.py: where checkpoints live; directory names that name run, generation
and step, and read back."""

from __future__ import annotations

import pytest

from worker.layout import (
    MANIFEST,
    CheckpointDir,
    dir_of_manifest,
    parse_generation,
    parse_step,
    run_dir,
)


def test_checkpoint_dir_url_names_run_generation_and_step() -> None:
    d = CheckpointDir("/data/ckpt", "run-a", 3, 42)
    assert d.url == "/data/ckpt/run-a/g000003/step-0000000042"
    assert d.manifest_url == "/data/ckpt/run-a/g000003/step-0000000042/manifest.json"
    assert d.file("__0_0.distcp") == "/data/ckpt/run-a/g000003/step-0000000042/__0_0.distcp"
    # A trailing slash on the root does not double up, and URLs keep their scheme.
    assert CheckpointDir("/data/ckpt/", "run-a", 3, 42).url == d.url
    assert (CheckpointDir("s3://bucket/ck", "r", 12, 7).url
            == "s3://bucket/ck/r/g000012/step-0000000007")
    assert run_dir("/data/ckpt/", "run-a") == "/data/ckpt/run-a"


def test_parse_step_and_generation_round_trip_the_directory_names() -> None:
    d = CheckpointDir("/r", "run", 3, 42)
    gen_name, step_name = d.url.split("/")[-2:]
    assert parse_generation(gen_name) == 3
    assert parse_step(step_name) == 42
    assert parse_step("step-0000000000") == 0
    assert parse_generation("g999999") == 999999
    for bad in ("step-42", "step-00000000042", "xstep-0000000042", "step-0000000042.tmp",
                "g000003", ""):
        assert parse_step(bad) is None, bad
    for bad in ("g3", "g0000003", "step-0000000042", "G000003", "g000003x", ""):
        assert parse_generation(bad) is None, bad


def test_dir_of_manifest() -> None:
    d = CheckpointDir("/r", "run", 1, 2)
    assert dir_of_manifest(d.manifest_url) == d.url
    for bad in (d.url, f"{d.url}/other.json", f"{d.url}x{MANIFEST}", MANIFEST):
        with pytest.raises(ValueError, match=MANIFEST):
            dir_of_manifest(bad)

"""scripts/gpu_check.py on the CPU: the same checks a GPU machine runs, so the script
cannot rot between GPU runs. Two OS processes for the two-rank part, one for the
process group; no broker. Also scripts/gpu_state.py and scripts/gpu_ckpt.py (the
process group, RNG, grad scaler, DCP and staging checks) and how a check that
cannot run, or raises, is reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ("process_group", "rng", "grad_scaler", "dcp", "staging")


def test_gpu_check_passes_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"),
                           "--device", "cpu", "--flips", "30", "--stage-mib", "4",
                           "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text("utf-8"))
    assert report["failures"] == []
    kinds = report["campaign"]["by_kind"]
    assert {k: (v["flips"], v["detected"]) for k, v in kinds.items()} == {
        "param": (10, 10), "grad": (10, 10), "optim": (10, 10)}
    phases = report["two_ranks"]["phases"]
    assert report["two_ranks"]["backend"] == "gloo"
    for target in ("param", "grad", "optim"):
        got = phases[f"bitflip {target}"]
        assert (got["step"], got["detector"], got["ranks"]) == (4, "agreement", [0, 1])
        assert [f.split(":")[1] for f in got["flips"]] == [target]  # r1:<kind>:<name>...
        assert got["flips"][0].startswith("r1:")
    assert phases["non-finite loss on rank 1"]["ranks"] == [1]
    assert report["syncs"]["note"].startswith("no CUDA device")
    checks = report["checks"]
    assert {k: v["status"] for k, v in checks.items()} == dict.fromkeys(CHECKS, "passed")
    assert all(all(c["asserts"].values()) and c["asserts"] for c in checks.values())
    group = checks["process_group"]["figures"]
    assert (group["backend"], group["device"]) == ("gloo", "cpu")
    assert "NCCL not exercised" in group["note"]
    scaler = checks["grad_scaler"]["figures"]
    assert scaler["restored"] == scaler["saved"]
    assert (scaler["saved"]["scale"], scaler["saved"]["_growth_tracker"]) == (2.0**16, 1)
    assert checks["dcp"]["figures"]["model+AdamW_tensors"] > 0
    staging = checks["staging"]["figures"]
    assert 3 << 20 < staging["state_bytes"] < 6 << 20
    assert staging["first_stage_s"] > 0 and staging["steady_stage_s"] > 0
    assert [line.split()[0] for line in report["summary"]] == ["PASS"] * (3 + len(CHECKS))


def test_gpu_check_refuses_cuda_without_a_device() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"),
                           "--device", "cuda"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr


def _gpu_state() -> Any:
    sys.path.append(str(ROOT / "scripts"))
    try:
        import gpu_state
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return gpu_state


@pytest.mark.parametrize(("raised", "status", "why"), [
    (ImportError("No module named 'crc32c'"), "skipped", "cannot import: No module named"),
    (ValueError("bad"), "failed", "ValueError: bad"),
    (None, "failed", "nothing asserted"),
])
def test_a_check_that_cannot_run_or_raises_is_reported(raised: Exception | None, status: str,
                                                        why: str) -> None:
    gpu_state = _gpu_state()

    def check(rec: Any) -> None:
        if raised is not None:
            raise raised

    got = gpu_state.run(check)
    assert (got["status"], got["why"].startswith(why) or why in got["why"]) == (status, True)


def test_a_skip_and_a_false_assertion_are_reported() -> None:
    gpu_state = _gpu_state()

    def skip(rec: Any) -> None:
        raise gpu_state.Skip("no CUDA device")

    def half(rec: Any) -> None:
        rec.expect("holds", True)
        rec.expect("does not hold", False)

    assert gpu_state.run(skip)["why"] == "no CUDA device"
    got = gpu_state.run(half)
    assert (got["status"], got["why"]) == ("failed", "did not hold: does not hold")

"""scripts/gpu_check.py on the CPU: the same checks a GPU machine runs, so the script
cannot rot between GPU runs. Two OS processes for the two-rank part; no broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_passes_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"),
                           "--device", "cpu", "--flips", "30", "--json", str(out)],
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


def test_gpu_check_refuses_cuda_without_a_device() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"),
                           "--device", "cuda"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr

"""The Apache Kafka runtime jars, resolved by Maven into a cache outside the clone.

The repository carries only ``stack/pom.xml``; ``mvn dependency:copy-dependencies``
copies the broker and its transitive dependencies into
``$RUNLEDGER_CACHE/kafka-<version>/lib``. A marker written after a complete
copy makes later calls free, and records the pom's digest so that editing the
pom (a version bump) fetches again.

Tested in tests/runledger/stack/test_cluster.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from runledger.errors import StackError

MARKER = ".complete"
JARS_ENV = "RUNLEDGER_CACHE"


def pom_path() -> Path:
    """``stack/pom.xml`` of the checkout this package is installed (editable) from."""
    return Path(__file__).resolve().parents[2] / "stack" / "pom.xml"


def cache_root() -> Path:
    """``$RUNLEDGER_CACHE``, else ``~/.cache/runledger``: a download cache, the one default
    outside RUNLEDGER_HOME; it is shared by every stack and holds nothing of any."""
    return Path(os.environ.get(JARS_ENV) or "~/.cache/runledger").expanduser()


def kafka_version(pom: Path) -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if match is None:
        raise StackError(f"{pom} declares no <kafka.version> property")
    return match.group(1).strip()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Two processes (make and a pytest fixture, say) may fetch at once; the lock
    # makes the second one wait and then find the marker.
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure_jars(cache: Path | None = None) -> Path:
    """Return the directory holding the Kafka jars, fetching them if needed."""
    pom = pom_path()
    if not pom.is_file():
        raise StackError(f"cannot find {pom}; runledger must be installed from a checkout")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    home = (cache or cache_root()) / f"kafka-{kafka_version(pom)}"
    lib = home / "lib"
    marker = home / MARKER
    if _complete(marker, digest, lib):
        return lib
    with _locked(home.parent / f"{home.name}.lock"):
        if _complete(marker, digest, lib):
            return lib
        _fetch(pom, home, lib)
        marker.write_text(digest + "\n")
    return lib


def _complete(marker: Path, digest: str, lib: Path) -> bool:
    return marker.is_file() and marker.read_text().strip() == digest and lib.is_dir()


def _fetch(pom: Path, home: Path, lib: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("mvn (Apache Maven 3.8+) is not on PATH; it fetches the Kafka jars")
    home.mkdir(parents=True, exist_ok=True)
    # Copy into a fresh directory and rename it into place, so an interrupted
    # fetch never leaves a half-filled lib/ that looks usable.
    staging = Path(tempfile.mkdtemp(prefix="lib.", dir=home))
    cmd = [
        mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not any(staging.glob("kafka_*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        raise StackError(f"mvn could not fetch the Kafka jars (exit {proc.returncode}): {tail[0]}")
    if lib.exists():
        shutil.rmtree(lib)
    staging.rename(lib)

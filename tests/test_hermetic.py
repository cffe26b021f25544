"""The suite is hermetic: a user's catalog and running stack change neither its result nor
themselves.

Issue #33: with one dataset catalog in ``~/.local/share/runledger``, 20 tests of
``make test`` failed ("unknown dataset manifest"): a spec's manifest id is checked
against the default catalog wherever one exists, and an alias the tests use resolved
there. Here a user's home is poisoned the way a real one would be: a catalog in the
old default place and in ``$RUNLEDGER_HOME/datasets`` (the default home,
``~/.local/state/runledger``), both holding another corpus under the alias the tests
use (``corpus/latest``), ``RUNLEDGER_DATASETS`` exported to it, and a stack running
(as secure as the session's), remembered in the home's ``current-stack.json`` as
``stack up`` leaves it. Then ``scripts/test.sh`` (what ``make test`` runs: its own
throwaway broker, its own home) runs tests that use the default catalog and the
remembered stack, and ``scripts/with-broker.sh`` (``make bench-smoke``'s broker)
starts and stops its own; the tests must all pass, with the user's files and stack
exactly as they were (contents, modes, mtimes; no record added to any topic of the
user's stack, its pointer not rewritten or forgotten).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataplane.catalog import Catalog, build_manifest
from dataplane.synth import template, write_corpus
from events.errors import BrokerUnavailable
from events.kafka.reader import Watermarks
from events.topics import ALL
from runledger import current
from runledger.stack.jars import JARS_ENV
from tests import reaper
from tests.stacks import private_stack

pytestmark = pytest.mark.slow  # a user's stack and the throwaway broker of test.sh

ROOT = Path(__file__).resolve().parents[1]
RUNS = "tests/runledger/commands/test_runs.py"
# Each fails when it reads the user's home: the example spec's manifest id is not in
# the user's catalog ("unknown dataset manifest"), the user's corpus/latest resolves
# where the test expects it refused, the remembered stack answers where the test
# expects no broker at all; test_dataset.py's commands use the default catalog.
SUBSET = [
    f"{RUNS}::test_submit_writes_the_canonical_spec_to_requests",
    f"{RUNS}::test_a_bad_spec_names_every_bad_field_and_writes_nothing",
    f"{RUNS}::test_submit_prints_the_resolution_before_connecting",
    f"{RUNS}::test_the_pin_checks_an_id_only_where_a_catalog_exists",
    "tests/runledger/commands/test_dataset.py",
]


def user_catalog(url: str, corpus: Path) -> None:
    """A catalog holding the user's own corpus under the alias the tests use."""
    store = Catalog(url)
    mid = store.put(build_manifest(template(str(corpus), seed=99), str(corpus)))
    store.set_alias("corpus/latest", mid)
    store.set_alias("synth/latest", mid)


def snapshot(root: Path, skip: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and directory under ``root`` (but ``skip``, which a live broker writes):
    its digest, mode and mtime."""
    out: dict[str, tuple[str, int, int]] = {}
    for path in sorted(root.rglob("*")):
        if path == skip or skip in path.parents:
            continue
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    return out


def log_ends(marks: Watermarks) -> dict[tuple[str, int], tuple[int, int]]:
    """Every partition's watermarks, once each partition's leader answers (a stack just up
    may still be electing them)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return marks.get()
        except BrokerUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def test_a_users_catalog_and_running_stack_change_nothing(tmp_path: Path) -> None:
    home = tmp_path / "user"
    state = home / ".local" / "state" / "runledger"  # the user's RUNLEDGER_HOME, by default
    write_corpus(str(tmp_path / "corpus"), seed=99)
    old_default = str(home / ".local" / "share" / "runledger" / "datasets")
    user_catalog(old_default, tmp_path / "corpus")
    user_catalog(str(state / "datasets"), tmp_path / "corpus")
    (home / ".config").mkdir()

    stack = private_stack(state / "stack")
    info = stack.up()
    try:
        current.remember(state, stack.data_dir)
        marks = Watermarks(info.bootstrap, ALL)
        try:
            before_log = log_ends(marks)
            before = snapshot(home, stack.data_dir)
            before_state = (stack.data_dir / "stack.json").read_bytes()
            env = user_env(home, old_default)
            run_the_subset(env)
            # `make bench-smoke`'s throwaway broker, outside test.sh's home: it must not
            # take the user's pointer over (and `down` forget it) either.
            alone = subprocess.run(["scripts/with-broker.sh", "true"], cwd=ROOT, env=env,
                                   capture_output=True, text=True, timeout=600, check=False)
            assert alone.returncode == 0, alone.stderr
            assert snapshot(home, stack.data_dir) == before  # catalogs, pointer: not one byte
            assert current.remembered_dir(state) == stack.data_dir
            assert (stack.data_dir / "stack.json").read_bytes() == before_state
            assert log_ends(marks) == before_log  # no record reached the user's stack
        finally:
            marks.close()
        assert stack.status().running  # and it still runs
    finally:
        stack.down(purge=True)


def user_env(home: Path, catalog: str) -> dict[str, str]:
    """The environment of a user whose home is ``home`` and who exported
    ``RUNLEDGER_DATASETS=catalog``: none of this suite's homes or settings, but its jar
    cache (found from the real home) and its reaper's mark (the inner brokers die with us)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "RUNLEDGER_")) or k in (JARS_ENV, reaper.MARK)}
    return env | {"HOME": str(home), "RUNLEDGER_DATASETS": catalog, "SOAK": "0",
                  "VENV": sys.prefix}


def run_the_subset(env: dict[str, str]) -> None:
    """``scripts/test.sh`` on :data:`SUBSET` in ``env``; every test must pass, none skipped."""
    out = subprocess.run(["scripts/test.sh", "-p", "no:cacheprovider", *SUBSET], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    [summary] = [line for line in out.stdout.splitlines() if re.search(r"\d+ passed", line)]
    assert not re.search(r"failed|error|skipped", summary), summary

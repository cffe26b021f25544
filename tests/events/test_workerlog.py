"""events/workerlog.py: the one rule for where a worker's log lies under its agent's work dir."""

from __future__ import annotations

import posixpath

from hypothesis import given
from hypothesis import strategies as st

from events.workerlog import path_component, worker_log_file, worker_log_path


def test_the_layout_is_run_generation_and_logical_id() -> None:
    assert worker_log_path("run-1", 3, "r0") == "run-1/g3/r0.log"
    assert worker_log_file("/srv/agent", "run-1", 3, "r0") == "/srv/agent/run-1/g3/r0.log"


def test_a_hostile_name_becomes_one_component_inside_the_work_dir() -> None:
    assert worker_log_path("../../etc", 1, "a/b") == "_.._etc/g1/a_b.log"
    assert path_component("..") == "_" and path_component("") == "_"


@given(st.text(max_size=40), st.integers(0, 10**6), st.text(max_size=40))
def test_every_path_stays_under_the_work_dir(run: str, gen: int, lid: str) -> None:
    path = worker_log_file("/w", run, gen, lid)
    assert posixpath.normpath(path).startswith("/w/")
    assert path.count("/") == 4  # /w/<run>/g<gen>/<lid>.log: no separator from a name

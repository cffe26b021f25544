"""controller/policy.py: failure classification from exits and missing progress.

The retry policy (backoff, escalation) is applied by the run's rules and tested
through them in tests/controller/test_run_decide.py and tests/controller/test_reconcile.py.
"""

from __future__ import annotations

from controller import policy


def test_exit_codes_and_signals_are_classified() -> None:
    assert policy.from_exit("r0", "n", None, 9).signature == "worker_crash:signal=9"
    assert policy.from_exit("r0", "n", 13, None).failure_class == "worker_crash"
    assert policy.from_exit("r0", "n", 65, None).failure_class == "data"
    assert policy.from_exit("r0", "n", 74, None).failure_class == "storage"
    assert policy.from_exit("r0", "n", 125, None).failure_class == "infrastructure"
    assert policy.from_exit("r0", "n", 86, None).failure_class == "non_finite"
    assert policy.from_exit("r0", "n", 87, None).failure_class == "silent_corruption"
    assert policy.no_progress(5, 100).signature == "hang:no_progress"
    assert policy.no_heartbeat("r1", "n", 100).failure_class == "hang"

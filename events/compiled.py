"""The compiled part (``runledger_native``, the Rust crate in ``native/`` that
``make venv`` builds), found once for every user of it.

``native`` is the module, or None on an install that did not build ``native/``
(the container image): each user then keeps to its Python path with the same
answers (``events.columnar``'s readers, ``events.signed.bulk``).

Tested in tests/events/signed/test_bulk.py and tests/projectors/test_fastpath.py
(an install without it).
"""

from __future__ import annotations

from types import ModuleType


def _compiled() -> ModuleType | None:
    try:
        import runledger_native
    except ImportError:  # native/ not built
        return None
    return runledger_native


native: ModuleType | None = _compiled()

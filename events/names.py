"""Names and paths that cross the log: one rule for each, shared by every package. Pure.

Run ids key Kafka records and name directories (``<root>/<run>/g<gen>/``), log
files and worker environments; logical ids and node names do too. A name that
could hold ``/``, ``..`` or a control character could therefore climb out of
a directory or forge a line of a log, so every name has one charset and a
length, checked where a name enters (the spec, the agent's options) and again
where one is acted on (the agent refuses a start command that breaks a rule):

- a **name** (run id, logical id): ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``: it
  cannot be ``.`` or ``..``, and has no ``/``;
- a **host name** (node name, topology domain): the same charset, at most 63
  characters (a DNS label), which also keeps the member list of the largest
  generation inside one Kafka record (``controller.spec.bounds``);
- a **node key** ``node/<host name>``: the pseudo run id of an agent's records;
- a **spec key** ``spec/<64 lowercase hex>``: the pseudo run id of a record about
  a spec (its digest without ``sha256:``), such as a preflight's result;
- a **dataset alias**: segments of the same characters, none ``.`` or ``..``,
  joined by ``/`` (``corpus/latest``; the catalog's rule), at most 256;
- a **storage path** (a checkpoint root, a manifest path): a local path or an
  fsspec URL with no ``..`` segment and no control character, at most 4096
  characters; :func:`outside_roots` says whether it lies inside one of a set of
  declared roots, a relative path being resolved against a base directory.
  Paths are compared as text, never resolved on a file system (this module
  does no I/O): a symbolic link inside a root is the root owner's choice.

Each check returns ``None`` for a valid value, else a problem starting with
its reason (a named constant), so callers can put it in a rejection as it is.

Tested in tests/events/test_names.py.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

NAME_MAX = 128
HOST_MAX = 63
ALIAS_MAX = 256
PATH_MAX = 4096
NODE_PREFIX = "node/"
SPEC_PREFIX = "spec/"

BAD_NAME = "bad_name"
BAD_PATH = "bad_path"
PATH_OUTSIDE_ROOTS = "path_outside_roots"

_CHARS = "letters, digits, '.', '_' or '-', starting with a letter or digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The dataset catalog's alias segments (dataplane.catalog), which predate this rule.
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)", re.S)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def name_problem(value: str, what: str = "name", limit: int = NAME_MAX) -> str | None:
    """Why ``value`` is not a name of at most ``limit`` characters; ``None`` if it is."""
    if not (isinstance(value, str) and _NAME.fullmatch(value) and len(value) <= limit):
        return f"{BAD_NAME}: {what} {value!r:.200} must be 1-{limit} {_CHARS}"
    return None


def run_id_problem(run_id: str) -> str | None:
    return name_problem(run_id, "run id")


def logical_id_problem(logical_id: str) -> str | None:
    return name_problem(logical_id, "logical id")


def host_problem(value: str, what: str = "node name") -> str | None:
    return name_problem(value, what, HOST_MAX)


def key_problem(key: str) -> str | None:
    """A record key: a run id, the node key ``node/<host name>`` of an agent, or a
    spec key ``spec/<64 hex>``."""
    if isinstance(key, str) and key.startswith(NODE_PREFIX):
        return host_problem(key[len(NODE_PREFIX):])
    if isinstance(key, str) and key.startswith(SPEC_PREFIX):
        if _HEX64.fullmatch(key[len(SPEC_PREFIX):]):
            return None
        return f"{BAD_NAME}: spec key {key!r:.200} must be {SPEC_PREFIX}<64 lowercase hex>"
    return run_id_problem(key)


def alias_problem(alias: str) -> str | None:
    """A dataset alias: names joined by ``/``, at most :data:`ALIAS_MAX` characters."""
    if not isinstance(alias, str) or len(alias) > ALIAS_MAX or not all(
            _SEGMENT.fullmatch(part) and part not in (".", "..") for part in alias.split("/")):
        return (f"{BAD_NAME}: dataset alias {alias!r:.300} must be segments of letters,"
                f" digits, '.', '_' or '-' (not '.' or '..') joined by '/', at most"
                f" {ALIAS_MAX} characters")
    return None


def path_problem(path: str, what: str = "path") -> str | None:
    """Why ``path`` (a local path or an fsspec URL) may not be used at all; ``None`` if it may."""
    if not isinstance(path, str) or not path:
        return f"{BAD_PATH}: {what} must be a non-empty path or URL"
    if len(path) > PATH_MAX:
        return f"{BAD_PATH}: {what} is {len(path)} characters, the limit is {PATH_MAX}"
    if _CONTROL.search(path):
        return f"{BAD_PATH}: {what} {path!r:.200} contains a control character"
    if ".." in _split(path)[1].split("/"):
        return f"{BAD_PATH}: {what} {path!r:.200} has a '..' segment, which could leave its root"
    return None


def outside_roots(path: str, roots: Sequence[str], base: str, what: str = "path") -> str | None:
    """Why ``path`` is not inside one of ``roots``; ``None`` when it is.

    A relative path (or root) is resolved against ``base`` (the workers' working
    directory). ``file://`` URLs are local paths; any other URL matches a root
    only with the same scheme and host.
    """
    bad = path_problem(path, what)
    if bad is not None:
        return bad
    where, at = _resolved(path, base)
    for root in roots:
        if path_problem(root) is not None:
            continue
        root_where, root_at = _resolved(root, base)
        if where == root_where and (at == root_at or at.startswith(root_at.rstrip("/") + "/")):
            return None
    listed = ", ".join(roots) if roots else "none"
    return (f"{PATH_OUTSIDE_ROOTS}: {what} {path!r:.200} is outside the allowed roots"
            f" ({listed})")


def _split(path: str) -> tuple[str, str]:
    """``(scheme://host, path)``; ``("", path)`` for a local path or a ``file://`` URL."""
    m = _URL.fullmatch(path)
    if m is None:
        return "", path
    scheme = m[1].lower()
    if scheme == "file":
        return "", m[3] or "/"
    return f"{scheme}://{m[2].lower()}", m[3] or "/"


def _resolved(path: str, base: str) -> tuple[str, str]:
    where, at = _split(path)
    if not where and not at.startswith("/"):
        at = posixpath.join(_split(base)[1] or "/", at)
    # No '..' is left to collapse (path_problem): this only drops '.', '//' and a trailing '/'.
    normal = posixpath.normpath("/" + at.lstrip("/"))
    return where, normal

"""Building manifests from templates, and the catalog that stores them under their ids.

:func:`build_manifest` turns a template (a manifest whose objects are given as
paths or glob patterns) into a complete, validated :class:`DatasetManifest` by
reading every matched object's header and digest.

:class:`Catalog` is a directory (any fsspec URL)::

    manifests/<64 hex>.json     the canonical JSON bytes; the name is the id's hex part
    aliases/<alias path>.json   {"alias": ..., "id": ..., "previous": <id or null>}
    tmp/                        staging for atomic writes (written, then moved in place)

A manifest file is immutable: it is written once, and every read re-hashes it,
so an edited copy is refused rather than trusted. Aliases are the only mutable
names; a run resolves them to an id before it starts (docs/architecture.md §11).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import uuid
from typing import Any

import fsspec
import yaml
from pydantic import ValidationError

from dataplane.documents import sha256_digest
from dataplane.errors import CatalogError, ManifestError
from dataplane.home import (  # re-exported: where the catalog lives by default
    DATASETS_ENV,
    DEFAULT_HOME,
    HOME_ENV,
    default_catalog_url,
    runledger_home,
)
from dataplane.manifest import DatasetManifest, in_scope, join_url

_ID = re.compile(r"sha256:([0-9a-f]{64})")
_ALIAS = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
_MAGIC = re.compile(r"[*?\[]")




def is_manifest_id(ref: str) -> bool:
    return _ID.fullmatch(ref) is not None


# --- templates -----------------------------------------------------------------


def build_manifest(template: dict[str, Any] | str, base: str, *,
                   source: str | None = None) -> DatasetManifest:
    """The complete manifest a template describes.

    ``base`` is the URL (or local directory) that a relative ``root`` or
    ``access`` entry is taken against, normally the template's own directory;
    ``root`` defaults to ``base`` and ``access`` to ``[root]``. Each entry of a
    source's ``objects`` is a path or glob relative to ``root`` (matches sorted),
    or a mapping with at least ``path``, whose given fields must agree with the
    stored object. ``source`` names the template in errors (default ``base``).
    """
    where = source or base
    doc = _load_template(template, where)
    root = _absolute(str(doc.get("root", ".")), base)
    doc["root"] = root
    access = doc.get("access", [root])
    if isinstance(access, list) and all(isinstance(a, str) for a in access):
        access = [_absolute(a, base) for a in access]
        doc["access"] = access
    else:
        raise ManifestError(where, ["access: must be a list of URL prefixes"])
    problems: list[str] = []
    sources = doc.get("sources")
    if isinstance(sources, list):
        doc["sources"] = [_fill_source(i, s, root, access, problems) for i, s in enumerate(sources)]
    if problems:
        raise ManifestError(where, problems)
    try:
        return DatasetManifest.model_validate(doc)
    except ValidationError as exc:
        raise ManifestError.from_validation(where, exc) from None


def _load_template(template: dict[str, Any] | str, where: str) -> dict[str, Any]:
    if isinstance(template, str):
        try:
            loaded = yaml.safe_load(template)
        except yaml.YAMLError as exc:
            raise ManifestError(where, [f"not valid YAML: {exc}"]) from None
    else:
        loaded = template
    if not isinstance(loaded, dict):
        raise ManifestError(where, ["(template): must be a mapping of fields"])
    return dict(loaded)  # a shallow copy: the caller's template is never modified


def _absolute(url: str, base: str) -> str:
    """``url`` against ``base``, ``.`` and ``..`` folded away (the access check refuses them)."""
    if "://" in url:
        return _normal_url(url)
    if url.startswith("/"):
        return posixpath.normpath(url)
    if "://" in base:
        return _normal_url(join_url(base, url))
    return posixpath.normpath(os.path.abspath(os.path.join(base, url)))


def _normal_url(url: str) -> str:
    protocol, _, rest = url.partition("://")
    return f"{protocol}://{posixpath.normpath(rest)}" if rest else url


def _fill_source(i: int, src: Any, root: str, access: list[str],
                 problems: list[str]) -> Any:
    if not isinstance(src, dict):
        return src  # the model reports the wrong type
    name = src.get("name", f"#{i}")
    items = src.get("objects")
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list):
        return src  # missing or malformed: the model reports it
    label = f"sources[{name}].objects"
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for j, item in enumerate(items):
        for path, given in _expand(f"{label}[{j}]", item, root, problems):
            if path in seen:
                problems.append(f"{label}[{j}] {path}: listed twice")
                continue
            seen.add(path)
            entry = _entry(f"{label}[{j}] {path}", path, given, root, access, problems)
            if entry is not None:
                entries.append(entry)
    first = 0  # logical ranges are contiguous in the order the objects are listed
    for entry in entries:
        if entry.setdefault("first", first) != first:
            problems.append(f"{label} {entry['path']}: first is {entry['first']!r} in the"
                            f" template, but the ranges are contiguous so it is {first}")
        entry["first"] = first
        first += entry["records"]
    return {**src, "objects": entries}


def _expand(label: str, item: Any, root: str, problems: list[str]
            ) -> list[tuple[str, dict[str, Any]]]:
    """(path, given fields) for each object an item names; globs sorted."""
    if isinstance(item, dict):
        path = item.get("path")
        if not isinstance(path, str) or not path:
            problems.append(f"{label}: an object mapping needs a path")
            return []
        return [(path, dict(item))]
    if not isinstance(item, str) or not item:
        problems.append(f"{label}: must be a path, a glob pattern or an object mapping")
        return []
    if not _MAGIC.search(item):
        return [(item, {})]
    url = join_url(root, item)
    fs, pattern = fsspec.core.url_to_fs(url)
    matches = fs.glob(pattern, detail=True)
    files = sorted(p for p, info in matches.items() if info.get("type") != "directory")
    if not files:
        problems.append(f"{label} {item!r}: the glob matches no object under {root}")
        return []
    _, root_path = fsspec.core.url_to_fs(root)
    prefix = root_path.rstrip("/") + "/"
    out: list[tuple[str, dict[str, Any]]] = []
    for p in files:
        if p.startswith(prefix) and "://" not in item and not item.startswith("/"):
            out.append((p[len(prefix):], {}))  # relative to root, as the template wrote it
        else:
            out.append((fs.unstrip_protocol(p) if "://" in item else p, {}))
    return out


def _entry(label: str, path: str, given: dict[str, Any], root: str, access: list[str],
           problems: list[str]) -> dict[str, Any] | None:
    url = join_url(root, path)
    if not in_scope(url, access):
        # Checked before reading: the scope says what may be read at all.
        problems.append(f"{label}: {url} is outside the access scope {access}")
        return None
    # numpy, which shards needs, only when a dataset is built: a command that merely
    # names the catalog (every runledger command through runledger.config) starts fast.
    from dataplane.shards import ShardFormatError, shard_info

    try:
        info = shard_info(url)
    except FileNotFoundError:
        problems.append(f"{label}: no such object {url}")
        return None
    except ShardFormatError as exc:
        problems.append(f"{label}: not an rltok-v1 shard: {exc}")
        return None
    except OSError as exc:
        problems.append(f"{label}: cannot read {url}: {exc}")
        return None
    measured = {"digest": info.digest, "bytes": info.bytes, "records": info.records,
                "tokens": info.tokens}
    bad = [f"{k} is {given[k]!r} in the template but {v!r} in the object"
           for k, v in measured.items() if k in given and given[k] != v]
    if bad:
        problems.append(f"{label}: {'; '.join(bad)}")
        return None
    return {**given, **measured, "path": path}


# --- the catalog ---------------------------------------------------------------


class Catalog:
    """Manifests stored by id, and aliases naming them; see the module docstring."""

    def __init__(self, url: str) -> None:
        if "://" not in url:
            url = os.path.abspath(os.path.expanduser(url))
        self.url = url.rstrip("/") or url
        try:
            self.fs, self._root = fsspec.core.url_to_fs(self.url)
        except (ValueError, ImportError) as exc:  # an unknown protocol, a missing backend
            raise CatalogError(f"cannot open the dataset catalog {self.url}: {exc}") from None

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    def _path(self, *parts: str) -> str:
        return "/".join([self._root.rstrip("/"), *parts])

    def exists(self) -> bool:
        """Whether anything was ever stored here (a fresh catalog has no directory yet)."""
        return bool(self.fs.isdir(self._path("manifests")) or self.fs.isdir(self._path("aliases")))

    def _write(self, path: str, data: bytes) -> None:
        # Stage, then move: a reader never sees half a file under its final name.
        tmp = self._path("tmp", uuid.uuid4().hex)
        self.fs.makedirs(self._path("tmp"), exist_ok=True)
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, path)

    # manifests

    def put(self, manifest: DatasetManifest) -> str:
        """Store ``manifest`` under its id (once) and return the id."""
        data = manifest.canonical_json().encode()
        mid = manifest.dataset_id
        path = self._manifest_path(mid)
        if self.fs.exists(path):
            if self.fs.cat_file(path) != data:
                raise CatalogError(
                    f"the stored copy of {mid} in {self.url} was altered; not overwriting it"
                    f" (inspect or remove {path})")
            return mid
        self._write(path, data)
        return mid

    def get(self, mid: str) -> DatasetManifest:
        """The manifest ``mid``, after checking its stored bytes still hash to ``mid``."""
        path = self._manifest_path(mid)
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            count = len(self.ids())
            raise CatalogError(
                f"unknown dataset manifest {mid}: the catalog {self.url} holds {count}"
                f" manifest{'' if count == 1 else 's'} (see `runledger dataset list`)"
            ) from None
        actual = sha256_digest(data)
        if actual != mid:
            raise CatalogError(f"the stored manifest {mid} in {self.url} was altered: its bytes"
                               f" hash to {actual}")
        try:
            manifest = DatasetManifest.model_validate(json.loads(data))
        except (ValueError, ValidationError) as exc:
            raise CatalogError(f"the stored manifest {mid} in {self.url} is not a valid"
                               f" manifest: {str(exc).splitlines()[0]}") from None
        if manifest.dataset_id != mid:
            raise CatalogError(f"the stored manifest {mid} in {self.url} is not in canonical"
                               f" form (it describes {manifest.dataset_id})")
        return manifest

    def has(self, mid: str) -> bool:
        return bool(self.fs.exists(self._manifest_path(mid)))

    def ids(self) -> list[str]:
        try:
            names = self.fs.ls(self._path("manifests"), detail=False)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            stem = posixpath.basename(str(name)).removesuffix(".json")
            if is_manifest_id(f"sha256:{stem}") and str(name).endswith(".json"):
                out.append(f"sha256:{stem}")
        return sorted(out)

    def _manifest_path(self, mid: str) -> str:
        m = _ID.fullmatch(mid)
        if m is None:
            raise CatalogError(f"{mid!r} is not a dataset manifest id (sha256:<64 lowercase hex>)")
        return self._path("manifests", f"{m.group(1)}.json")

    # aliases

    def set_alias(self, alias: str, mid: str) -> str | None:
        """Point ``alias`` at ``mid`` (which must be stored); return what it pointed at before."""
        path = self._alias_path(alias)
        if not self.has(mid):
            self.get(mid)  # raises the "unknown manifest" error, with the count
        previous = self._read_alias(alias, path) if self.fs.exists(path) else None
        if previous == mid:
            return previous
        doc = {"alias": alias, "id": mid, "previous": previous}
        self._write(path, (json.dumps(doc, sort_keys=True) + "\n").encode())
        return previous

    def resolve(self, ref: str) -> str:
        """A manifest id for ``ref``: an id (checked to be stored) or an alias."""
        if ref.startswith("sha256:"):
            if not self.has(ref):
                self.get(ref)  # the "unknown manifest" or "not an id" error
            return ref
        path = self._alias_path(ref)
        if not self.fs.exists(path):
            known = sorted(self.aliases())
            listing = ", ".join(known) if known else "none yet (`runledger dataset build" \
                " TEMPLATE --alias NAME` makes one)"
            raise CatalogError(f"unknown dataset alias {ref!r} in the catalog {self.url};"
                               f" known aliases: {listing}")
        return self._read_alias(ref, path)

    def aliases(self) -> dict[str, str]:
        """Every alias and the id it names, sorted by alias."""
        top = self._path("aliases")
        try:
            files = self.fs.find(top)
        except FileNotFoundError:
            return {}
        out = {}
        for f in sorted(str(p) for p in files):
            if f.endswith(".json") and f.startswith(top + "/"):
                alias = f[len(top) + 1:].removesuffix(".json")
                if _ALIAS.fullmatch(alias):
                    out[alias] = self._read_alias(alias, f)
        return out

    def _alias_path(self, alias: str) -> str:
        parts = alias.split("/")
        if not _ALIAS.fullmatch(alias) or any(p in (".", "..") for p in parts):
            raise CatalogError(
                f"{alias!r} is not a dataset alias: use segments of letters, digits, '.', '_'"
                " or '-' joined by '/', with no '.' or '..' segment")
        return self._path("aliases", f"{alias}.json")

    def _read_alias(self, alias: str, path: str) -> str:
        try:
            doc = json.loads(self.fs.cat_file(path))
        except (ValueError, FileNotFoundError) as exc:
            raise CatalogError(f"the alias file {path} is damaged: {exc}") from None
        mid = doc.get("id") if isinstance(doc, dict) else None
        if not isinstance(mid, str) or not is_manifest_id(mid) or doc.get("alias") != alias:
            raise CatalogError(f"the alias file {path} is damaged: it must hold"
                               f" {{\"alias\": {alias!r}, \"id\": \"sha256:...\"}}")
        return mid


__all__ = ["DATASETS_ENV", "DEFAULT_HOME", "HOME_ENV", "Catalog", "build_manifest",
           "default_catalog_url", "is_manifest_id", "runledger_home"]

"""The local stack ``runledger stack up`` started last, remembered for every other command.

``stack up`` writes ``$RUNLEDGER_HOME/current-stack.json`` (the data directory
only; the ports and the security settings are read from that directory's own
``stack.json`` each time, so a restart on other ports is followed) and
``stack down`` of the same directory removes it. :func:`runledger.config.bootstrap`
falls back to it after ``--bootstrap`` and ``RUNLEDGER_BOOTSTRAP``.

Credentials, secure by default: the remembered stack's file of the command's
role (a person's commands: ``operator``; the services ``controller``,
``agent`` and ``project``: their own role; never the admin's), and the signing
key of the controller (its facts and commands) and of the operator (a person's
requests: submit, cancel, resume, node operations), are offered only for the
remembered stack's own address, so a password is never sent to a cluster the
user named some other way; only when ``RUNLEDGER_CREDENTIALS`` is unset; and
only when the pointer and the credentials file belong to this user and no one
else may write the pointer (the credentials file's own mode is checked where
it is read, :func:`events.kafka.connection.load_credentials`).

Tested in tests/runledger/test_current.py.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from runledger.errors import UsageError

POINTER = "current-stack.json"
# runledger.stack.layout.HOST and STATE_FILE; not imported, because the stack
# package imports runledger.config, which imports this module.
HOST = "127.0.0.1"
STATE_FILE = "stack.json"
ROLE = "operator"  # a person's role: submit, cancel, read; not the admin's powers
# The roles a command may ask the remembered stack's credentials of: never the admin.
ROLES = ("operator", "controller", "agent", "projector")
CONTROLLER_KEY = "keys/controller.key"  # runledger.stack.keys writes it at `stack up`
OPERATOR_KEY = "keys/operator.key"  # likewise; it signs a person's requests
# The roles whose signing key a command may be offered: the controller's facts and
# commands, a person's requests. Never the admin's key, as never its credentials.
SIGNING_KEYS = {"controller": CONTROLLER_KEY, "operator": OPERATOR_KEY}


@dataclass(frozen=True, slots=True)
class Remembered:
    data_dir: Path
    bootstrap: str
    credentials: Path | None  # the role's file of a secure stack
    signing_key: Path | None = None  # the role's key of a secure stack (SIGNING_KEYS)


def pointer(home: Path) -> Path:
    return home / POINTER


def remember(home: Path, data_dir: Path) -> Path:
    """Record ``data_dir`` as the current stack (owner-only file); returns the pointer."""
    home.mkdir(parents=True, exist_ok=True)
    path = pointer(home)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"data_dir": str(data_dir.resolve())}) + "\n")
    tmp.replace(path)
    return path


def forget(home: Path, data_dir: Path) -> bool:
    """Remove the pointer if it names ``data_dir``; True when it did."""
    path = pointer(home)
    recorded = _recorded_dir(path)
    if recorded is None or recorded != data_dir.resolve():
        return False
    path.unlink(missing_ok=True)
    return True


def remembered_dir(home: Path) -> Path | None:
    """The data directory the pointer names, if there is a pointer."""
    return _recorded_dir(pointer(home))


def recall(home: Path, role: str = ROLE) -> Remembered | None:
    """The remembered stack, with ``role``'s credentials (and, for the controller and
    the operator, its signing key) when it is secure; None when nothing (or a purged
    directory) is remembered."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {ROLES}")
    path = pointer(home)
    data_dir = _recorded_dir(path)
    if data_dir is None:
        return None
    _check_owned(path, writable_by_others=False)
    state = data_dir / STATE_FILE
    if not state.is_file():
        return None  # purged or moved: as if nothing were remembered
    try:
        raw = json.loads(state.read_text())
        address = ",".join(f"{HOST}:{n['port']}" for n in raw["nodes"])
        secure = bool(raw.get("secure", False))
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{state} (remembered in {path}) is unreadable ({exc}); run"
                         f" `runledger stack up --data-dir {data_dir}` again or remove"
                         f" {path}") from None
    return Remembered(data_dir, address,
                      _owned_file(data_dir / "credentials" / f"{role}.properties", secure),
                      _owned_file(data_dir / SIGNING_KEYS.get(role, CONTROLLER_KEY),
                                  secure and role in SIGNING_KEYS))


def _owned_file(path: Path, wanted: bool) -> Path | None:
    """``path`` when it is wanted and there, after checking that it is this user's."""
    if not wanted or not path.is_file():
        return None
    _check_owned(path, writable_by_others=True)
    return path


def _recorded_dir(path: Path) -> Path | None:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is unreadable ({exc}); remove it and run"
                         " `runledger stack up` again") from None
    data_dir = raw.get("data_dir") if isinstance(raw, dict) else None
    if not isinstance(data_dir, str) or not data_dir:
        raise UsageError(f"{path} names no data_dir; remove it and run `runledger stack up`")
    return Path(data_dir)


def _check_owned(path: Path, *, writable_by_others: bool) -> None:
    """Refuse a file another user owns (or, for the pointer, may rewrite): it could
    point this user's commands, and their password, at someone else's broker."""
    st = path.stat()
    if st.st_uid != os.getuid():
        raise UsageError(f"{path} belongs to uid {st.st_uid}, not to you; remove it, or set"
                         " RUNLEDGER_BOOTSTRAP and RUNLEDGER_CREDENTIALS yourself")
    if not writable_by_others and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(f"{path} may be rewritten by other users (mode"
                         f" {stat.S_IMODE(st.st_mode):o}); run `chmod 600 {path}`")

"""Principals and their ACLs on any cluster, through the Admin API.

:func:`add_principal` creates (or re-keys) a SCRAM-SHA-512 user;
:func:`apply_role` adds the ACLs of one role (``runledger.stack.acls``) for one
principal and is idempotent (Kafka keeps one copy of an identical binding);
:func:`current_acls` lists what a cluster holds for a principal. Both need
the admin's credentials (a super user, or ALTER on the cluster).

Tested in tests/runledger/stack/test_security.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException

# confluent_kafka.admin re-exports these without __all__, which mypy --strict rejects.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from events.kafka.connection import principal
from runledger.errors import StackError
from runledger.stack.acls import Grant, Role, grants_for
from runledger.stack.admin import Credentials, admin_client
from runledger.stack.credentials import ensure

SCRAM_ITERATIONS = 8192  # Kafka's minimum for SCRAM-SHA-512 is 4096
_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
              "transactional_id": ResourceType.TRANSACTIONAL_ID}
_NAMES = {v: k for k, v in _RESOURCES.items()}
TIMEOUT_S = 15.0


def _failure(what: str, exc: KafkaException, credentials: Credentials) -> StackError:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.code() in (
            KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError._AUTHENTICATION):
        # Not err.str(): the broker's text of this refusal dumps its request object.
        return StackError(
            f"{what}: the broker refused principal {principal(credentials)!r} "
            f"({err.name()}); run this with the admin's credentials "
            "(RUNLEDGER_CREDENTIALS=<stack data dir>/credentials/admin.properties)")
    reason = err.str() if isinstance(err, KafkaError) else str(exc)
    return StackError(f"{what}: {reason}")


def add_principal(bootstrap: str, name: str, password: str,
                  credentials: Credentials = None) -> None:
    """Create or update the SCRAM-SHA-512 credential of ``name``."""
    add_principals(bootstrap, {name: password}, credentials)


def add_principals(bootstrap: str, passwords: dict[str, str],
                   credentials: Credentials = None) -> None:
    """Create or update the SCRAM-SHA-512 credentials of several principals, in one call."""
    admin = admin_client(bootstrap, credentials)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(name, info, password.encode())
        for name, password in passwords.items()]
    futures = admin.alter_user_scram_credentials(upserts, request_timeout=TIMEOUT_S)
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            raise _failure(f"creating the credentials of principal {name!r}", exc,
                           credentials) from None


def binding(principal: str, grant: Grant) -> AclBinding:
    pattern = ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL
    return AclBinding(_RESOURCES[grant.resource], grant.name, pattern, f"User:{principal}", "*",
                      AclOperation[grant.operation], AclPermissionType.ALLOW)


def apply_role(bootstrap: str, name: str, role: Role,
               credentials: Credentials = None) -> list[Grant]:
    """Add ``role``'s ACLs for principal ``name``; returns the grants applied."""
    return apply_roles(bootstrap, {name: role}, credentials)[name]


def apply_roles(bootstrap: str, roles: dict[str, Role],
                credentials: Credentials = None) -> dict[str, list[Grant]]:
    """Add the ACLs of several principals' roles in one call; the grants of each."""
    grants = {name: list(grants_for(role)) for name, role in roles.items()}
    admin = admin_client(bootstrap, credentials)
    futures = admin.create_acls([binding(name, g) for name, gs in grants.items() for g in gs],
                                request_timeout=TIMEOUT_S)
    for bound, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            name = bound.principal.removeprefix("User:")
            raise _failure(f"adding the {roles[name].value} ACLs of {name!r}", exc,
                           credentials) from None
    return grants


def current_acls(bootstrap: str, name: str,
                 credentials: Credentials = None) -> list[Grant]:
    """The ALLOW grants a cluster holds for principal ``name`` (sorted)."""
    admin = admin_client(bootstrap, credentials)
    # None matches any resource name and any host; the stubs declare str only.
    wanted = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,  # type: ignore[arg-type]
                              f"User:{name}", None, AclOperation.ANY,  # type: ignore[arg-type]
                              AclPermissionType.ANY)
    try:
        found: Iterable[AclBinding] = admin.describe_acls(
            wanted, request_timeout=TIMEOUT_S).result()
    except KafkaException as exc:
        raise _failure(f"listing the ACLs of {name!r}", exc, credentials) from None
    return sorted(_grant(b) for b in found if b.permission_type == AclPermissionType.ALLOW)


def _grant(found: AclBinding) -> Grant:
    # The client hands back enum members; the declared union also allows str and int.
    restype, operation = found.restype, found.operation
    resource = _NAMES[restype] if isinstance(restype, ResourceType) and restype in _NAMES \
        else str(restype)
    op = operation.name if isinstance(operation, AclOperation) else str(operation)
    return Grant(resource, found.name, op,
                 found.resource_pattern_type == ResourcePatternType.PREFIXED)


def ensure_roles(data_dir: Path, bootstrap: str, credentials: Credentials,
                 ca: Path | None = None) -> None:
    """A secure local stack's role principals: one per role, named as the role,
    with its credentials file in the data dir and its ACLs on the cluster."""
    names = tuple(role.value for role in Role)
    add_principals(bootstrap, ensure(data_dir, names, ca), credentials)
    apply_roles(bootstrap, {role.value: role for role in Role}, credentials)

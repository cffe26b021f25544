"""``runledger principal add`` and ``runledger acl apply``: identities and their roles.

Both act on any cluster (``--bootstrap`` or ``RUNLEDGER_BOOTSTRAP``) with the
admin's credentials (``RUNLEDGER_CREDENTIALS``); the roles and their grants are
:mod:`runledger.stack.acls`. ``acl apply --dry-run`` needs no broker: it prints
what would be applied.

Tested in tests/runledger/stack/test_security.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from events.kafka.connection import security_settings
from runledger import config
from runledger.config import AsJson, Bootstrap
from runledger.errors import UsageError
from runledger.stack.acls import Grant, Role, grants_for, role_of
from runledger.stack.credentials import check_name, new_password, render, write_private
from runledger.stack.principals import add_principal, apply_role

RoleOption = Annotated[str, typer.Option(
    "--role", help="operator, agent, controller or projector.")]
Out = Annotated[Path | None, typer.Option(
    "--out", help="Where to write the credentials file (default ./NAME.properties; never "
                  "overwritten).")]
Assign = Annotated[list[str] | None, typer.Option(
    "--principal", metavar="NAME=ROLE",
    help="A principal and its role (repeatable); default: one principal per role, named as "
         "the role (what `runledger stack up` creates).")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the ACLs; apply nothing.")]


def register(app: typer.Typer) -> None:
    principal_app = typer.Typer(help="Kafka principals (SCRAM-SHA-512 users).",
                                no_args_is_help=True)
    principal_app.command("add")(add)
    acl_app = typer.Typer(help="The roles' ACLs.", no_args_is_help=True)
    acl_app.command("apply")(apply)
    app.add_typer(principal_app, name="principal")
    app.add_typer(acl_app, name="acl")


def add(name: Annotated[str, typer.Argument(help="The principal's name.")],
        role: RoleOption, out: Out = None, as_json: AsJson = False,
        bootstrap: Bootstrap = None) -> None:
    """Create a principal with a new password and its role's ACLs; write its credentials file.

    The password goes into the file (mode 0600) and nowhere else; the file is
    what the principal's RUNLEDGER_CREDENTIALS names.
    """
    check_name(name)
    kind = role_of(role)
    target = out or Path(f"{name}.properties")
    if target.exists():
        raise UsageError(f"{target} already exists; choose another --out or remove it")
    address = config.bootstrap(bootstrap)
    password = new_password()
    add_principal(address, name, password)
    grants = apply_role(address, name, kind)
    # The new principal reaches the cluster the way the admin does (TLS, its CA).
    admin = security_settings()
    protocol = admin.get("security.protocol", "SASL_PLAINTEXT")
    ssl = {k: v for k, v in admin.items()
           if k.startswith("ssl.") and k not in ("ssl.key.location", "ssl.key.password",
                                                 "ssl.certificate.location")}
    write_private(target, render(name, password, protocol, ssl))
    if as_json:  # never the password: it is in the file alone
        typer.echo(json.dumps({"principal": name, "role": kind.value, "acls": len(grants),
                               "credentials": str(target)}))
        return
    typer.echo(f"principal {name} ({kind.value}, {len(grants)} ACLs); credentials in {target}")


def apply(principal: Assign = None, dry_run: DryRun = False, as_json: AsJson = False,
          bootstrap: Bootstrap = None) -> None:
    """Apply each role's ACLs to its principals (idempotent); print them."""
    pairs = _pairs(principal)
    address = None if dry_run else config.bootstrap(bootstrap)
    applied: list[tuple[str, Role, list[Grant]]] = []
    for name, role in pairs:
        grants = list(grants_for(role)) if address is None else apply_role(address, name, role)
        applied.append((name, role, grants))
    if as_json:
        typer.echo(json.dumps({"applied": not dry_run, "principals": [
            {"principal": n, "role": r.value,
             "acls": [{"resource": g.resource, "name": g.name, "prefixed": g.prefixed,
                       "operation": g.operation} for g in gs]}
            for n, r, gs in applied]}, indent=2))
        return
    for name, role, grants in applied:
        for grant in grants:
            typer.echo(f"User:{name:<12} {role.value:<10} ALLOW {grant.describe()}")
    verb = "would apply" if dry_run else "applied"
    typer.echo(f"{verb} {sum(len(g) for _, _, g in applied)} ACLs for {len(applied)} "
               "principal(s)", err=True)


def _pairs(raw: list[str] | None) -> list[tuple[str, Role]]:
    if not raw:
        return [(role.value, role) for role in Role]
    out = []
    for item in raw:
        name, sep, role = item.partition("=")
        if not sep:
            raise UsageError(f"--principal {item!r}: expected NAME=ROLE, e.g. alice=operator")
        check_name(name)
        out.append((name, role_of(role)))
    return out

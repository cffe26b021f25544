"""The docs (the event catalog, the fold's refusal reasons) and compose.yaml stay true to the code.

The docs' links and commands are checked in tests/test_docs_pages.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from events.fold import __dict__ as fold_namespace
from events.model import EVENT_TYPES
from events.topics import topic_specs

ROOT = Path(__file__).resolve().parents[1]


def test_readme_catalog_lists_every_event_type_and_no_other() -> None:
    text = (ROOT / "docs" / "events.md").read_text()
    section = text.split("# Event catalog", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([A-Za-z]+)` \|", section, flags=re.M))
    assert listed == set(EVENT_TYPES)


def test_readme_names_every_refusal_reason() -> None:
    # architecture §5, "Refusal reasons"; any page of the docs may name one.
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(p.read_text() for p in pages)
    reasons = {v for k, v in fold_namespace.items() if k.isupper() and isinstance(v, str)}
    assert reasons, "the fold declares its reasons as module constants"
    missing = {r for r in reasons if f"`{r}`" not in text}
    assert not missing


def test_compose_creates_the_declared_topics_with_their_configs() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    script = compose["services"]["topics"]["command"][0]
    created = {}
    for line in script.splitlines():
        m = re.search(r"--topic (\S+) --partitions (\d+)(.*)$", line)
        if m:
            configs = dict(c.split("=", 1) for c in re.findall(r"--config (\S+)", m[3]))
            created[m[1]] = (int(m[2]), configs)
    declared = {s.name: (s.partitions, s.config) for s in topic_specs(1)}
    assert set(created) == set(declared)
    for name, (partitions, config) in declared.items():
        assert created[name][0] == partitions, name
        assert created[name][1].get("retention.ms") == config["retention.ms"], name


def test_compose_is_secure_and_runs_each_service_as_its_role() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    kafka = services["kafka"]["environment"]
    assert kafka["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert kafka["KAFKA_SUPER_USERS"] == "User:admin"
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(protocols.values()) == {"SASL_SSL"}  # SASL/PLAIN only inside TLS
    roles = {name: services[name]["environment"]["ROLE"]
             for name in ("acls", "controller", "projector", "agent")}
    assert roles == {"acls": "admin", "controller": "controller", "projector": "projector",
                     "agent": "agent"}
    for name in roles:
        assert services[name]["entrypoint"][-1].startswith("scripts/compose-credentials.sh && ")
    jaas = kafka["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"]
    assert all(f"user_{role}=" in jaas for role in roles.values())

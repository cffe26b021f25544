"""compose.yaml and the Dockerfile, checked without a Docker engine.

What a broken file would cost: the broker writing outside its volume (the
runs log lost on ``docker compose down``), an env name the image ignores, a
service installing packages at every start, a dataset or checkpoint path no
volume holds, a port open beyond this machine, a live view that could write the
projection or serve without TLS, a Prometheus scraping a port nothing serves.
tests/test_docs.py checks the topics and the roles; tests/test_grafana.py the
dashboard's series.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from events.kafka.connection import load_credentials
from tests.test_docs import ROOT

KAFKA_IMAGE = "apache/kafka:"
# Images compose.yaml runs that are not the one it builds: the broker, and the
# metrics' Prometheus and Grafana.
OTHER_IMAGES = (KAFKA_IMAGE, "prom/prometheus:", "grafana/grafana:")

# Names the apache/kafka image reads besides the broker's own configs: its
# docker/examples/README.md ("Using Environment Variables": CLUSTER_ID,
# KAFKA_LOG4J_ROOT_LOGLEVEL, KAFKA_LOG4J_LOGGERS) and the scripts of
# docker/resources/common-scripts (configureDefaults, configure, launch) in
# apache/kafka 4.1.
IMAGE_NAMES = {"CLUSTER_ID", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS", "KAFKA_OPTS",
               "KAFKA_HEAP_OPTS", "KAFKA_JMX_PORT", "KAFKA_JMX_HOSTNAME"}

# Broker configs from the Kafka 4.1 documentation (kafka.apache.org/41/documentation.html:
# "Broker Configs", and "Authorization and ACLs" for the StandardAuthorizer's
# allow.everyone.if.no.acl.found and super.users), the ones compose.yaml may set.
BROKER_CONFIGS = {
    "node.id", "process.roles", "listeners", "advertised.listeners",
    "listener.security.protocol.map", "inter.broker.listener.name",
    "controller.listener.names", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "log.dirs", "metadata.log.dir",
    "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol", "authorizer.class.name",
    "allow.everyone.if.no.acl.found", "super.users",
    "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr", "group.initial.rebalance.delay.ms",
    "min.insync.replicas", "default.replication.factor", "auto.create.topics.enable",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.truststore.type",
    "ssl.truststore.location",
}
# "JAAS configuration for Kafka brokers": one login per listener and mechanism.
LISTENER_JAAS = re.compile(r"listener\.name\.([a-z0-9_]+)\.([a-z0-9-]+)\.sasl\.jaas\.config")

# Our own names on the broker's container: not KAFKA_*, so the image renders
# nothing from them (the healthcheck reads the admin's password).
OURS = {"RUNLEDGER_ADMIN_PASSWORD"}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def property_name(env: str) -> str:
    """The image's rule, env name to property: drop KAFKA_; ___ is -, __ is _, _ is ."""
    assert env.startswith("KAFKA_"), env
    marks = {1: ".", 2: "_", 3: "-"}
    return re.sub(r"_{1,3}", lambda m: marks[len(m[0])], env[len("KAFKA_"):]).lower()


def test_property_name_follows_the_images_documented_examples() -> None:
    assert property_name("KAFKA_ABC_DEF") == "abc.def"
    assert property_name("KAFKA_ABC___DEF") == "abc-def"
    assert property_name("KAFKA_ABC__DEF") == "abc_def"


def kafka_env() -> dict[str, Any]:
    env: dict[str, Any] = compose()["services"]["kafka"]["environment"]
    return env


def test_every_env_name_of_the_broker_is_one_the_image_documents() -> None:
    env = kafka_env()
    listeners = {p.split(":")[0].lower()
                 for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")}
    mechanisms = {m.lower() for m in env["KAFKA_SASL_ENABLED_MECHANISMS"].split(",")}
    unknown = []
    for name in env:
        if name in IMAGE_NAMES or name in OURS:
            continue
        prop = property_name(name) if name.startswith("KAFKA_") else name
        jaas = LISTENER_JAAS.fullmatch(prop)
        if prop in BROKER_CONFIGS or (jaas and jaas[1] in listeners and jaas[2] in mechanisms):
            continue
        unknown.append(f"{name} ({prop})")
    assert not unknown, f"not documented for the apache/kafka image: {unknown}"


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Mount path -> named volume, for a service's ``volume:path`` entries."""
    out = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        out[target] = source
    return out


def read_only(service: dict[str, Any], target: str) -> bool:
    """Whether ``service`` mounts something at ``target`` read-only."""
    return any(entry.split(":")[1] == target and "ro" in entry.split(":")[2:]
               for entry in service.get("volumes", []))


def volume_of(path: str, service: dict[str, Any]) -> str | None:
    """The named volume that holds ``path`` in ``service``'s container, if any."""
    declared = set(compose()["volumes"])
    for target, source in mounts(service).items():
        if source in declared and PurePosixPath(path).is_relative_to(target):
            return source
    return None


def test_the_broker_log_and_metadata_live_in_the_mounted_volume() -> None:
    kafka = compose()["services"]["kafka"]
    env = kafka["environment"]
    dirs = env["KAFKA_LOG_DIRS"].split(",")
    dirs += [env["KAFKA_METADATA_LOG_DIR"]] if "KAFKA_METADATA_LOG_DIR" in env else []
    for d in dirs:
        assert volume_of(d, kafka) == "kafka-data", d


def test_the_cluster_id_is_fixed_and_a_valid_kafka_uuid() -> None:
    cluster_id = str(kafka_env()["CLUSTER_ID"])
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id), cluster_id
    raw = base64.urlsafe_b64decode(cluster_id + "==")
    assert len(raw) == 16
    assert base64.urlsafe_b64encode(raw).decode().rstrip("=") == cluster_id  # canonical
    assert not cluster_id.startswith("-")  # kafka-storage.sh would read it as an option
    assert raw != bytes(16)
    assert cluster_id != "5L6g3nShT-eMCtK--X86sw"  # the image's default, every user's


def python_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose()["services"].items()
            if not str(s.get("image", "")).startswith(OTHER_IMAGES)}


def command_text(service: dict[str, Any]) -> str:
    parts = [*service.get("entrypoint", []), *service.get("command", [])]
    return " ".join(str(p) for p in parts)


def test_every_python_service_runs_the_one_built_image_and_installs_nothing() -> None:
    services = python_services()
    assert {"acls", "dataset", "controller", "projector", "agent", "query", "cli",
            "ui"} <= set(services)
    builders = [name for name, s in services.items() if "build" in s]
    assert len(builders) == 1, builders
    build = services[builders[0]]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).is_file()
    image = services[builders[0]]["image"]
    for name, service in services.items():
        assert service["image"] == image, name
        # Never pulled: a registry's image of that name is not this checkout.
        assert service["pull_policy"] in ("never", "build"), name
        assert "pip" not in command_text(service), name
        assert not any(":/src" in v or v.startswith(".:") for v in service.get("volumes", [])), name


def test_the_dataset_job_and_its_readers_share_the_datasets_volume() -> None:
    services = compose()["services"]
    job = services["dataset"]
    words = shlex.split(job["entrypoint"][-1].replace(";", " ").replace("{", " "))
    paths = [w for w in words if w.startswith("/")]
    assert paths, "the dataset job names where it writes"
    for path in paths:
        assert volume_of(path, job) == "datasets", path
    for name in ("dataset", "agent", "cli", "query"):
        env = services[name]["environment"]
        # Manifests name objects by absolute path: the same mount everywhere.
        assert env["RUNLEDGER_DATASETS"] == job["environment"]["RUNLEDGER_DATASETS"], name
        assert volume_of(env["RUNLEDGER_DATASETS"], services[name]) == "datasets", name
    assert services["agent"]["depends_on"]["dataset"]["condition"] == (
        "service_completed_successfully")


def test_workers_checkpoint_into_the_checkpoints_volume() -> None:
    services = compose()["services"]
    for name in ("agent", "cli"):
        root = services[name]["environment"]["RUNLEDGER_CHECKPOINT_ROOT"]
        assert volume_of(root, services[name]) == "checkpoints", name
    spec = yaml.safe_load((ROOT / "examples" / "compose-tiny.yaml").read_text())
    assert "root" not in spec["checkpoint"], "the spec leaves the root to the agent"


def test_query_reads_the_projection_the_projector_writes() -> None:
    services = compose()["services"]
    projector = services["projector"]
    db = re.search(r"--db (\S+)", command_text(projector))
    assert db
    assert volume_of(db[1], projector) == "state"
    query = services["query"]
    assert query["entrypoint"] == ["runledger", "query"]
    # query's default db is $RUNLEDGER_HOME/projection.duckdb: the projector's file.
    home = query["environment"]["RUNLEDGER_HOME"]
    assert str(PurePosixPath(home) / "projection.duckdb") == db[1]
    assert volume_of(home, query) == "state"
    # Reading needs no Kafka: no password reaches the query container.
    assert not any("PASSWORD" in k for k in query["environment"])
    assert not any("PASSWORD" in k for k in services["dataset"]["environment"])


def dockerfile_steps() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    steps = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            steps.append((word.upper(), rest))
    return steps


def test_the_dockerfile_installs_the_dependencies_then_the_package_once() -> None:
    steps = dockerfile_steps()
    installs = [(i, rest) for i, (word, rest) in enumerate(steps)
                if word == "RUN" and "pip install" in rest]
    package = [(i, rest) for i, rest in installs if re.search(r"pip install --no-deps \.(\s|$)",
                                                               rest)]
    assert len(package) == 1, installs
    assert all("-e " not in rest and "--editable" not in rest for _, rest in installs)
    copies = [(i, rest) for i, (word, rest) in enumerate(steps) if word == "COPY"]
    # The dependency layer sees pyproject.toml alone, so code changes keep it cached.
    deps = [i for i, rest in installs if i != package[0][0]]
    assert deps
    assert all(rest.split()[0] == "pyproject.toml" for i, rest in copies if i < max(deps))
    assert any(rest.split()[:2] == [".", "."] for i, rest in copies
               if max(deps) < i < package[0][0])
    assert ("USER", "runledger") in steps


def test_the_image_never_holds_secrets_or_local_state() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", "*.properties", "*.key", ".git", ".venv/", "*.duckdb"} <= ignored
    # What the services run from the image's checkout must stay in it.
    assert not {"scripts/", "examples/", "README.md", "pyproject.toml"} & ignored


def test_compose_signs_and_each_key_is_mounted_only_where_it_is_used() -> None:
    """The controller signs and refuses unsigned requests, the agent refuses unsigned
    commands, the cli signs with the operator's key; the keys job (the admin) makes and
    registers them; the admin's key reaches no other container."""
    services = compose()["services"]
    keys = services["keys"]
    assert keys["environment"]["ROLE"] == "admin"
    script = ROOT / "scripts" / "compose-keys.sh"
    assert keys["entrypoint"][-1] == ("scripts/compose-credentials.sh && exec "
                                      "scripts/compose-keys.sh")
    assert script.stat().st_mode & 0o111, "the keys job runs the script itself"
    text = script.read_text()
    assert "ensure_keys" in text  # registered as `runledger stack up` registers them
    for name, service in services.items():
        words = command_text(service)
        assert "--unsigned" not in words and "--trust-unsigned" not in words, name
        if name != "keys":
            assert "admin-key" not in mounts(service).values(), name
    assert mounts(keys) == {"/keys/admin": "admin-key", "/keys/controller": "controller-key",
                            "/keys/operator": "operator-key", "/keys/agent": "agent-key",
                            "/tls-ca": "tls-ca"}
    for name, env_name, volume in (("controller", "RUNLEDGER_SIGNING_KEY", "controller-key"),
                                   ("cli", "RUNLEDGER_KEY", "operator-key")):
        path = services[name]["environment"][env_name]
        assert volume_of(path, services[name]) == volume, name
        assert f"cp /keys/admin/keys/{PurePosixPath(path).name} {path}\n" in text, name
        assert f"{volume}:{PurePosixPath(path).parent}:ro" in services[name]["volumes"], name
    for name in ("controller", "agent"):
        assert services[name]["depends_on"]["keys"]["condition"] == (
            "service_completed_successfully"), name
    # Docker copies an image directory's owner into a new named volume: the runledger user's.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert all(f"/keys/{k}" in dockerfile for k in ("admin", "controller", "operator", "agent"))
    # The agent signs its reports with its own node key, enrolled by the keys job
    # straight into the one volume the agent mounts (read-only).
    node_key = "/keys/agent/node.agent-1.key"
    assert f"--node-key {node_key}" in command_text(services["agent"])
    assert "agent-key:/keys/agent:ro" in services["agent"]["volumes"]
    enroll = " ".join(text.replace("\\\n", " ").split())
    assert ("runledger node enroll agent-1 --admin-key /keys/admin/keys/admin.key "
            f"--key {node_key}") in enroll


def test_compose_speaks_tls_on_every_listener_and_every_client_trusts_the_stacks_ca() -> None:
    """SASL/PLAIN sends passwords as they are: only inside TLS. The broker's key is in a
    volume only the tls job and the broker mount; every client mounts the CA it trusts."""
    services = compose()["services"]
    kafka = services["kafka"]
    env = kafka["environment"]
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(protocols.values()) == {"SASL_SSL"}
    # The image's scripts demand a JKS keystore when an advertised listener reads *SSL://.
    assert "SSL" not in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_SSL_KEYSTORE_TYPE"] == env["KAFKA_SSL_TRUSTSTORE_TYPE"] == "PEM"
    for name in ("KAFKA_SSL_KEYSTORE_LOCATION", "KAFKA_SSL_TRUSTSTORE_LOCATION"):
        assert volume_of(env[name], kafka) == "broker-tls", name
    assert "broker-tls:/broker-tls:ro" in kafka["volumes"]
    assert kafka["depends_on"]["tls"]["condition"] == "service_completed_successfully"
    holders = {name for name, s in services.items() if "broker-tls" in mounts(s).values()}
    assert holders == {"kafka", "tls"}
    # The live view's key likewise: made by the tls job, read by the ui alone.
    holders = {name for name, s in services.items() if "ui-tls" in mounts(s).values()}
    assert holders == {"tls", "ui"}
    assert read_only(services["ui"], "/ui-tls")
    tls = services["tls"]
    assert tls["entrypoint"] == ["scripts/compose-tls.sh"] and str(tls["user"]) == "0"
    # Every client of the broker trusts the CA where compose-credentials.sh names it.
    for name, service in services.items():
        talks = "RUNLEDGER_BOOTSTRAP" in service.get("environment", {}) or name == "topics"
        if talks:
            assert volume_of("/tls-ca/ca.pem", service) == "tls-ca", name
    for check in (command_text(services["topics"]),
                  " ".join(kafka["healthcheck"]["test"])):
        assert "security.protocol=SASL_SSL" in check
        assert "ssl.truststore.location=/tls-ca/ca.pem" in check


def test_the_tls_job_makes_a_keystore_for_the_broker_and_a_ca_for_everyone(
        tmp_path: Path) -> None:
    """scripts/compose-tls.sh run for real (its three volumes as three folders): the
    certificate names the broker as the services reach it, the live view's is signed by the
    same CA; a second run keeps both, a new CA gets the view a new certificate."""
    broker, ca_dir, ui_dir = tmp_path / "broker-tls", tmp_path / "tls-ca", tmp_path / "ui-tls"
    broker.mkdir()
    ca_dir.mkdir()
    ui_dir.mkdir()
    env = {**os.environ, "KAFKA_UID": str(os.getuid()), "BROKER_TLS": str(broker),
           "TLS_CA": str(ca_dir), "UI_UID": str(os.getuid()), "UI_TLS": str(ui_dir),
           # `python` is the image's; here, this interpreter's (its venv's packages)
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run() -> None:
        done = subprocess.run([str(ROOT / "scripts" / "compose-tls.sh")], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr

    run()
    keystore, ca = broker / "tls" / "broker.pem", ca_dir / "ca.pem"
    assert stat.S_IMODE(keystore.stat().st_mode) == 0o600
    assert stat.S_IMODE((broker / "tls" / "ca.key").stat().st_mode) == 0o600
    assert keystore.stat().st_uid == os.getuid()
    assert stat.S_IMODE(ca.stat().st_mode) == 0o644  # public: every client reads it
    assert b"PRIVATE KEY" not in ca.read_bytes()
    leaf = x509.load_pem_x509_certificates(keystore.read_bytes())[0]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["kafka", "localhost"]
    assert leaf.issuer == x509.load_pem_x509_certificate(ca.read_bytes()).subject
    first, ui_first = ca.read_bytes(), (ui_dir / "ui.pem").read_bytes()
    check_ui_certificate(ui_dir, ca)
    run()
    assert ca.read_bytes() == first  # kept: clients keep trusting the same CA
    assert (ui_dir / "ui.pem").read_bytes() == ui_first
    # A new CA (its volume lost): the live view's certificate is made again, by it.
    for name in ("broker.pem", "ca.key", "ca.pem"):
        (broker / "tls" / name).unlink()
    run()
    assert ca.read_bytes() != first
    assert (ui_dir / "ui.pem").read_bytes() != ui_first
    check_ui_certificate(ui_dir, ca)


def check_ui_certificate(ui_dir: Path, ca: Path) -> None:
    """ui.pem and ui.key where the ui service reads them: a server certificate for the
    names a browser reaches it by, issued by the stack's CA, and the key that goes with it."""
    ui = compose()["services"]["ui"]
    words = command_text(ui).split()
    cert_path = words[words.index("--tls-cert") + 1]
    key_path = words[words.index("--tls-key") + 1]
    assert volume_of(cert_path, ui) == volume_of(key_path, ui) == "ui-tls"
    cert_file = ui_dir / PurePosixPath(cert_path).relative_to("/ui-tls")
    key_file = ui_dir / PurePosixPath(key_path).relative_to("/ui-tls")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.stat().st_uid == os.getuid()  # UI_UID: the image's user reads it
    assert b"PRIVATE KEY" not in cert_file.read_bytes()
    leaf, *chain = x509.load_pem_x509_certificates(cert_file.read_bytes())
    authority = x509.load_pem_x509_certificate(ca.read_bytes())
    assert chain == [authority]
    leaf.verify_directly_issued_by(authority)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "ui"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    key = serialization.load_pem_private_key(key_file.read_bytes(), None)
    pem = serialization.Encoding.PEM
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    assert key.public_key().public_bytes(pem, info) == leaf.public_key().public_bytes(pem, info)


def test_each_services_credentials_file_speaks_tls_to_the_stacks_ca(tmp_path: Path) -> None:
    path = tmp_path / "credentials.properties"
    env = {**os.environ, "ROLE": "agent", "PASSWORD": "secret",
           "RUNLEDGER_CREDENTIALS": str(path)}
    done = subprocess.run([str(ROOT / "scripts" / "compose-credentials.sh")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    settings = load_credentials(path)  # what every runledger client reads
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == "/tls-ca/ca.pem"
    assert settings["sasl.username"] == "agent"


# -- the live view and the metrics ---------------------------------------------------


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each ``ports`` entry."""
    out = []
    for entry in service.get("ports", []):
        parts = str(entry).split(":")
        assert len(parts) == 3, f"{entry!r}: name the address it binds on this machine"
        out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def test_every_published_port_is_on_this_machine_only() -> None:
    """Metrics name runs and principals, the brokers' and the view's ports ask for
    passwords: nothing is published beyond 127.0.0.1."""
    services = compose()["services"]
    for name, service in services.items():
        for address, host, container in published(service):
            assert address == "127.0.0.1", name
            assert host == container, name  # the documented ports are the same inside
    assert [p[1] for p in published(services["ui"])] == [8265]
    assert [p[1] for p in published(services["grafana"])] == [3000]


def test_the_live_view_reads_as_the_operator_and_never_writes() -> None:
    services = compose()["services"]
    ui = services["ui"]
    text = command_text(ui)
    assert ui["entrypoint"][-1].startswith("scripts/compose-credentials.sh && exec runledger ui ")
    words = shlex.split(ui["entrypoint"][-1].split("&& exec ", 1)[1])
    options = dict(zip(words[2::2], words[3::2], strict=True))
    assert set(options) == {"--host", "--port", "--db", "--tls-cert", "--tls-key"}, words
    # Reachable from the published port, so TLS (the server refuses without it).
    assert options["--host"] == "0.0.0.0"
    assert [(h, c) for _, h, c in published(ui)] == [(int(options["--port"]),) * 2]
    # The projection the projector writes, in a volume mounted read-only here.
    db = re.search(r"--db (\S+)", command_text(services["projector"]))
    assert db
    assert options["--db"] == db[1]
    assert volume_of(db[1], ui) == "state"
    assert read_only(ui, "/state")
    assert all(read_only(ui, target) for target in mounts(ui))
    # Kafka as the operator (read and log in), with no key to sign anything.
    env = ui["environment"]
    assert env["ROLE"] == "operator"
    assert env["PASSWORD"] == services["cli"]["environment"]["PASSWORD"]
    assert env["RUNLEDGER_BOOTSTRAP"] == services["controller"]["environment"][
        "RUNLEDGER_BOOTSTRAP"]
    assert "RUNLEDGER_KEY" not in env and "RUNLEDGER_SIGNING_KEY" not in env
    assert not any(source.endswith("-key") for source in mounts(ui).values())
    assert "--trust" not in text and "--insecure" not in text
    # The operator's key must be registered before a login can be checked against it.
    assert ui["depends_on"]["keys"]["condition"] == "service_completed_successfully"
    assert "ui-tls" in compose()["volumes"]
    tls = services["tls"]
    assert "ui-tls:/ui-tls" in tls["volumes"]
    # The ui's key is owned by the user the runledger image runs as.
    uid = re.search(r"useradd --uid (\d+) .* runledger", (ROOT / "Dockerfile").read_text())
    assert uid
    assert str(tls["environment"]["UI_UID"]) == uid[1]


def metrics_ports() -> dict[str, int]:
    """Service -> the port its ``--metrics`` serves, for those that serve one to the
    compose network (not loopback inside its own container)."""
    out = {}
    for name, service in compose()["services"].items():
        m = re.search(r"--metrics (\S+)", command_text(service))
        if m:
            host, _, port = m[1].rpartition(":")
            assert host not in ("", "127.0.0.1", "localhost"), f"{name}: unreachable"
            out[name] = int(port)
    return out


def test_prometheus_scrapes_exactly_the_metrics_ports_the_services_serve() -> None:
    services = compose()["services"]
    prometheus = services["prometheus"]
    config_mount = "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
    assert config_mount in prometheus["volumes"]
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]}
    served = {f"{name}:{port}" for name, port in metrics_ports().items()}
    assert served == {"controller:9464", "projector:9465", "agent:9466"}
    assert targets == served
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert len(set(jobs)) == len(jobs)
    # Published ports of the metrics services are the ones they serve.
    for name, port in metrics_ports().items():
        assert [c for _, _, c in published(services[name])] == [port], name
    assert set(prometheus["depends_on"]) == set(metrics_ports())


def test_grafana_is_provisioned_from_the_repository_read_only() -> None:
    services = compose()["services"]
    grafana = services["grafana"]
    binds: dict[str, Path] = {}
    for entry in grafana["volumes"]:
        source, target, *flags = entry.split(":")
        if source.startswith("./"):
            assert flags == ["ro"], entry
            assert (ROOT / source).exists(), entry
            binds[target] = ROOT / source
    assert binds["/etc/grafana/provisioning/datasources/runledger.yaml"] == (
        ROOT / "deploy" / "grafana" / "provisioning" / "datasources.yaml")
    assert binds["/etc/grafana/provisioning/dashboards/runledger.yaml"] == (
        ROOT / "deploy" / "grafana" / "provisioning" / "dashboards.yaml")

    def in_container(path: str) -> Path:
        """The repository file a path inside the grafana container is."""
        for target, source in binds.items():
            if PurePosixPath(path).is_relative_to(target):
                return source / PurePosixPath(path).relative_to(target)
        raise AssertionError(f"{path} is in no mount of the grafana service")

    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards.yaml").read_text())["providers"]
    (folder,) = [p["options"]["path"] for p in provider]
    assert (in_container(folder) / "runledger.json").is_file()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert in_container(home) == ROOT / "deploy" / "grafana" / "runledger.json"
    sources = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources.yaml").read_text())["datasources"]
    (source,) = sources
    assert source["type"] == "prometheus"
    url = re.fullmatch(r"http://([a-z-]+):(\d+)", source["url"])
    assert url
    assert url[1] == "prometheus" and url[1] in services
    assert [c for _, _, c in published(services["prometheus"])] == [int(url[2])]
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert "grafana-data:/var/lib/grafana" in grafana["volumes"]


def test_the_env_recipe_names_every_password_compose_asks_for() -> None:
    text = (ROOT / "compose.yaml").read_text()
    recipe = re.search(r"^#\s+for r in ([A-Z ]+); do$", text, flags=re.M)
    assert recipe
    asked = set(re.findall(r"\$\{RUNLEDGER_([A-Z]+)_PASSWORD", text))
    assert asked == set(recipe[1].split())

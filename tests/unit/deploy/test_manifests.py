"""The compose file and the Kubernetes manifests are valid and wired as documented.

No Docker engine or cluster here, so validity is checked against the published
schemas offline: the Compose Specification schema (as shipped by the npm
package dclint, whose linter also runs) and the Kubernetes OpenAPI-derived
JSON schemas bundled by kubernetes-validate (strict: unknown fields are
errors), for the oldest and newest Kubernetes versions we claim. Then what
the schemas cannot see: which service runs what, probes on the right ports,
config and secrets split, every Deployment with its PodDisruptionBudget.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import tomllib
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from jsonschema import Draft7Validator

from services.runtime.settings import KafkaSettings
from tests.unit.deploy.support import (
    DCLINT,
    K8S,
    NPM_HINT,
    REPO_ROOT,
    require_file,
    require_module,
    require_program,
)

pytestmark = pytest.mark.unit

SERVICES = ("gatekeeper", "producer", "consumer")
K8S_VERSIONS = ("1.30.0", "latest")
KUBECTL_HINT = "apt-get install kubectl (any kubectl >= 1.14 has kustomize built in)"


def _kafka_aliases() -> set[str]:
    return {str(f.alias) for f in KafkaSettings.model_fields.values() if f.alias}


def _sample_agents() -> dict[str, str]:
    """The sample agents the distribution registers (pyproject entry points)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    agents: dict[str, str] = project["project"]["entry-points"]["agui_relay.agents"]
    return agents


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in service.get("environment", {}).items()}


# --------------------------------------------------------------------------- compose


def test_compose_file_matches_the_compose_specification(
    compose: dict[str, Any], compose_schema: dict[str, Any]
) -> None:
    errors = sorted(Draft7Validator(compose_schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_compose_schema_is_the_real_one(compose_schema: dict[str, Any]) -> None:
    """Guard against a stub: the schema must reject what Compose rejects."""
    validator = Draft7Validator(compose_schema)
    assert compose_schema["title"] == "Compose Specification"
    assert not validator.is_valid({"services": {"a": {"image": "x", "restart_policy": "always"}}})
    assert not validator.is_valid({"services": {"a": {"depends_on": {"b": {"condition": "up"}}}}})
    assert validator.is_valid({"services": {"a": {"image": "x"}}})


def test_dclint_reports_no_errors() -> None:
    node = require_program("node", "apt-get install nodejs")
    script = require_file(DCLINT, NPM_HINT)
    done = subprocess.run(
        [node, str(script), "--formatter", "json", "--quiet", "deploy/compose.yaml"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout or "[]")
    assert sum(entry.get("errorCount", 0) for entry in report) == 0, done.stdout


def test_kafka_is_apache_kafka_4_in_kraft_mode(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", kafka["image"]), kafka["image"]
    env = _env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in key for key in env)
    node_id = env["KAFKA_NODE_ID"]
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert voters.startswith(f"{node_id}@kafka:")
    listeners = dict(item.split("://", 1) for item in env["KAFKA_LISTENERS"].split(","))
    protocol_map = env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    protocols = dict(item.split(":", 1) for item in protocol_map.split(","))
    assert set(listeners) == set(protocols)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert voters.endswith(listeners[env["KAFKA_CONTROLLER_LISTENER_NAMES"]].lstrip(":"))
    # A KRaft cluster id is 16 bytes in URL-safe base64 without padding.
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"])
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "healthcheck" in kafka


def test_topics_are_created_after_kafka_is_healthy_and_before_the_services(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    topics = services["topics"]
    assert topics["command"] == ["topics", "create"]
    assert topics["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    assert topics["restart"] == "no"
    for name in SERVICES:
        assert services[name]["depends_on"]["topics"] == {
            "condition": "service_completed_successfully"
        }


def test_the_three_services_run_one_image_chosen_by_command(compose: dict[str, Any]) -> None:
    services = compose["services"]
    images = {services[name]["image"] for name in (*SERVICES, "topics")}
    assert len(images) == 1
    assert not images.pop().endswith(":latest")
    for name in SERVICES:
        assert services[name]["command"] == [name]
        assert services[name]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert services[name]["read_only"] is True
        assert _env(services[name])["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:19092"
    listeners = _env(services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    assert "://kafka:19092" in listeners


def test_the_producer_hosts_the_sample_agents(compose: dict[str, Any]) -> None:
    configured = _env(compose["services"]["producer"])["AGUI_AGENTS"]
    pairs = dict(item.strip().split("=", 1) for item in configured.split(","))
    assert pairs == _sample_agents()


def test_the_consumer_serves_port_8000_with_a_healthcheck(compose: dict[str, Any]) -> None:
    consumer = compose["services"]["consumer"]
    env = _env(consumer)
    assert env["AGUI_HTTP_HOST"] == "0.0.0.0"
    assert env["AGUI_HTTP_PORT"] == "8000"
    assert consumer["ports"] == ["127.0.0.1:8000:8000"]
    assert consumer["healthcheck"]["test"][0] == "CMD"
    assert urlsplit(env["AGUI_HEALTHCHECK_URL"]).port == 8000


def test_kafka_only_services_check_their_health_port(compose: dict[str, Any]) -> None:
    for name in ("gatekeeper", "producer"):
        env = _env(compose["services"][name])
        url = urlsplit(env["AGUI_HEALTHCHECK_URL"])
        assert url.port == int(env["AGUI_HEALTH_PORT"]), name
        assert url.path == "/healthz"


def test_compose_kafka_settings_are_ones_the_code_reads(compose: dict[str, Any]) -> None:
    for name in (*SERVICES, "topics"):
        given = {k: v for k, v in _env(compose["services"][name]).items() if k.startswith("KAFKA_")}
        assert set(given) <= _kafka_aliases(), name
        assert KafkaSettings.model_validate(given).bootstrap_servers == "kafka:19092"


# --------------------------------------------------------------------------- kubernetes


def _validate_k8s(resources: list[dict[str, Any]], version: str) -> list[str]:
    kv = require_module("kubernetes_validate.utils")
    wanted = kv.latest_version() if version == "latest" else version
    problems = []
    for resource in resources:
        name = f"{resource['kind']}/{resource['metadata']['name']}"
        try:
            kv.validate(resource, wanted, strict=True)
        except kv.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{name} (k8s {wanted}): {path}: {exc.message}")
        except kv.SchemaNotFoundError as exc:
            problems.append(f"{name}: {exc.message}")
    return problems


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_matches_the_kubernetes_schemas(
    k8s_resources: list[dict[str, Any]], version: str
) -> None:
    assert not _validate_k8s(k8s_resources, version)


def test_the_kubernetes_schemas_are_strict() -> None:
    """Guard against a lax validator: a misspelt field must be an error."""
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dta": {}}
    assert _validate_k8s([bad], "latest")


def test_kustomize_renders_exactly_the_listed_resources(
    k8s_resources: list[dict[str, Any]],
) -> None:
    kubectl = require_program("kubectl", KUBECTL_HINT)
    done = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rendered = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    key = lambda r: (r["kind"], r["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, rendered)) == sorted(map(key, k8s_resources))
    assert not _validate_k8s(rendered, "latest")


def test_the_example_overlay_sets_namespace_image_and_real_secrets() -> None:
    kubectl = require_program("kubectl", KUBECTL_HINT)
    overlay = K8S.parent / "k8s-overlay"
    done = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rendered = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert not _validate_k8s(rendered, "latest")
    assert {r["metadata"].get("namespace") for r in rendered} == {"agents"}
    pods = [r["spec"]["template"]["spec"] for r in rendered
            if r["kind"] in ("Deployment", "StatefulSet", "Job")]
    assert {c["image"] for pod in pods for c in pod["containers"]} == {
        "registry.example.org/agui-relay:0.1.0"
    }
    (secret,) = [r for r in rendered if r["kind"] == "Secret"]
    lines = (overlay / "secrets.env").read_text().split()
    expected = dict(line.split("=", 1) for line in lines)
    got = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert got == expected
    assert "stringData" not in secret


def test_the_kustomization_lists_every_manifest(kustomization: dict[str, Any]) -> None:
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk
    assert "namespace" not in kustomization


def test_manifests_are_namespace_agnostic(k8s_resources: list[dict[str, Any]]) -> None:
    assert all("namespace" not in r["metadata"] for r in k8s_resources)


def _by_kind(resources: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in resources if r["kind"] == kind}


def _workload(resources: list[dict[str, Any]], service: str) -> dict[str, Any]:
    """The service's Deployment, or its StatefulSet (the gatekeeper keeps state on disk)."""
    name = f"agui-relay-{service}"
    found = _by_kind(resources, "Deployment").get(name)
    return found or _by_kind(resources, "StatefulSet")[name]


def _config(resources: list[dict[str, Any]]) -> dict[str, str]:
    return dict(_by_kind(resources, "ConfigMap")["agui-relay-config"]["data"])


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_runs_hardened_with_probes_and_resources(
    k8s_resources: list[dict[str, Any]], service: str
) -> None:
    deployment = _workload(k8s_resources, service)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [service]
    assert not container["image"].endswith(":latest")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = _config(k8s_resources)
    want = int(config["AGUI_HTTP_PORT" if service == "consumer" else "AGUI_HEALTH_PORT"])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert ports[get["port"]] == want
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) >= {"cpu", "memory"}
    hardening = container["securityContext"]
    assert hardening["readOnlyRootFilesystem"] is True
    assert hardening["allowPrivilegeEscalation"] is False
    assert hardening["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp"}
    sources = {next(iter(s)): next(iter(s.values()))["name"] for s in container["envFrom"]}
    assert sources == {"configMapRef": "agui-relay-config", "secretRef": "agui-relay-secrets"}


@pytest.mark.parametrize("service", SERVICES)
def test_each_deployment_has_a_disruption_budget_for_its_pods(
    k8s_resources: list[dict[str, Any]], service: str
) -> None:
    deployment = _workload(k8s_resources, service)
    budget = _by_kind(k8s_resources, "PodDisruptionBudget")[f"agui-relay-{service}"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert budget["spec"].get("maxUnavailable", 0) < deployment["spec"]["replicas"]


def test_the_gatekeeper_keeps_its_state_stores_on_a_volume_claim_per_pod(
    k8s_resources: list[dict[str, Any]], compose: dict[str, Any],
) -> None:
    sts = _by_kind(k8s_resources, "StatefulSet")["agui-relay-gatekeeper"]
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == env["AGUI_STATE_DIR"]
    headless = _by_kind(k8s_resources, "Service")[sts["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    gatekeeper = compose["services"]["gatekeeper"]
    (volume,) = gatekeeper["volumes"]
    name, path = volume.split(":")
    assert path == _env(gatekeeper)["AGUI_STATE_DIR"]
    assert name in compose["volumes"]


def test_each_gatekeeper_pod_joins_its_group_under_its_own_stable_name(
    k8s_resources: list[dict[str, Any]], compose: dict[str, Any],
) -> None:
    """Static membership: a restarted pod (same name) takes its partitions back at once;
    two pods never share an id, or each would take the partitions from the other."""
    sts = _by_kind(k8s_resources, "StatefulSet")["agui-relay-gatekeeper"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    (instance,) = [e for e in container["env"] if e["name"] == "AGUI_GATEKEEPER_INSTANCE_ID"]
    assert instance["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    gatekeeper = compose["services"]["gatekeeper"]
    assert _env(gatekeeper)["AGUI_GATEKEEPER_INSTANCE_ID"]
    assert "replicas" not in gatekeeper.get("deploy", {})  # one process per id


def test_the_consumer_keeps_its_thread_view_stores_on_a_volume(
    k8s_resources: list[dict[str, Any]], compose: dict[str, Any],
) -> None:
    """A cache of the compacted topic, so a pod's own emptyDir (sized) is enough."""
    deployment = _by_kind(k8s_resources, "Deployment")["agui-relay-consumer"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (name,) = [n for n, path in mounts.items() if path == env["AGUI_STATE_DIR"]]
    assert volumes[name]["emptyDir"]["sizeLimit"]
    consumer = compose["services"]["consumer"]
    (volume,) = consumer["volumes"]
    name, path = volume.split(":")
    assert path == _env(consumer)["AGUI_STATE_DIR"]
    assert name in compose["volumes"]


def test_the_consumer_service_reaches_the_http_port(k8s_resources: list[dict[str, Any]]) -> None:
    service = _by_kind(k8s_resources, "Service")["agui-relay-consumer"]
    deployment = _by_kind(k8s_resources, "Deployment")["agui-relay-consumer"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_a_job_creates_the_topics(k8s_resources: list[dict[str, Any]]) -> None:
    job = _by_kind(k8s_resources, "Job")["agui-relay-topics"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["topics", "create"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_secrets_are_placeholders_and_stay_out_of_the_config_map(
    k8s_resources: list[dict[str, Any]],
) -> None:
    secret = _by_kind(k8s_resources, "Secret")["agui-relay-secrets"]
    assert "data" not in secret
    values = secret["stringData"]
    assert {"KAFKA_SASL_PASSWORD", "AGUI_API_KEYS"} <= set(values)
    assert all("change-me" in value for value in values.values())
    secretish = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY", re.IGNORECASE)
    assert not [key for key in _config(k8s_resources) if secretish.search(key)]


def test_k8s_kafka_settings_are_ones_the_code_reads(k8s_resources: list[dict[str, Any]]) -> None:
    secret = _by_kind(k8s_resources, "Secret")["agui-relay-secrets"]["stringData"]
    merged = {**_config(k8s_resources), **secret}
    given = {k: v for k, v in merged.items() if k.startswith("KAFKA_")}
    assert set(given) <= _kafka_aliases()
    # The values shipped must be a configuration the settings accept (enums, SASL triple).
    settings = KafkaSettings.model_validate(given)
    assert settings.security_protocol == given["KAFKA_SECURITY_PROTOCOL"]

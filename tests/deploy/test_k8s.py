"""The Kubernetes manifests against the Kubernetes JSON schemas (kubernetes-validate
bundles them: offline), and how the objects refer to one another."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from service.settings import Settings
from tests.deploy.files import DEPLOY, load_yaml, load_yaml_all

K8S = DEPLOY / "k8s"
# The oldest Kubernetes release still commonly run, and the newest the package knows.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
# Not core Kubernetes kinds: no schema in the package; checked by hand below.
NOT_CORE = {"kustomization.yaml", "servicemonitor.yaml"}


def manifests() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name not in NOT_CORE)


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_yaml_all(path):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifests(), ids=lambda p: p.name)
def test_manifest_matches_the_kubernetes_schema(path: Path, version: str) -> None:
    for doc in load_yaml_all(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_rejects_a_wrong_manifest() -> None:
    deployment = copy.deepcopy(objects()[("Deployment", "specgate")])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"path": "/ready"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest_but_the_optional_ones() -> None:
    kustomization = load_yaml(K8S / "kustomization.yaml")
    optional = NOT_CORE | {"secret.example.yaml"}
    expected = {p.name for p in K8S.glob("*.yaml")} - optional
    assert set(kustomization["resources"]) == expected
    assert all(doc["metadata"]["namespace"] == kustomization["namespace"]
               for key, doc in objects().items() if key[0] != "Namespace")


def gateway_pod() -> dict[str, Any]:
    pod: dict[str, Any] = objects()[("Deployment", "specgate")]["spec"]["template"]
    return pod


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container["env"]}


def test_gateway_replicas_gpu_and_probes() -> None:
    deployment = objects()[("Deployment", "specgate")]
    assert deployment["spec"]["replicas"] == 3
    (container,) = gateway_pod()["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == int(env(container)["SPECGATE_PORT"]["value"])
    annotations = gateway_pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["http"])
    assert annotations["prometheus.io/path"] == "/metrics"


def test_config_comes_from_the_configmap_and_keys_from_the_secret() -> None:
    (container,) = gateway_pod()["spec"]["containers"]
    volumes = {v["name"]: v for v in gateway_pod()["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config_path = Path(env(container)["SPECGATE_CONFIG"]["value"])
    config_volume = volumes[mounts[str(config_path.parent)]["name"]]
    configmap = objects()[("ConfigMap", config_volume["configMap"]["name"])]
    # The mounted file is deploy/specgate.gpu.yaml, word for word.
    assert configmap["data"][config_path.name] == (DEPLOY / "specgate.gpu.yaml").read_text()

    key_ref = env(container)["SPECGATE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]
    secret = objects()[("Secret", key_ref["name"])]
    assert key_ref["key"] in secret["stringData"]

    claim = volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in objects()

    # The API keys file the config names is the Secret's api-keys entry, mounted there.
    keys_file = Path(load_yaml(DEPLOY / "specgate.gpu.yaml")["api_keys_file"])
    keys_volume = volumes[mounts[str(keys_file.parent)]["name"]]["secret"]
    assert keys_volume["secretName"] == key_ref["name"]
    assert {"key": "api-keys", "path": keys_file.name} in keys_volume["items"]
    assert "api-keys" in secret["stringData"]


def test_services_select_their_pods() -> None:
    found = objects()
    for name in ("specgate", "redis"):
        service = found[("Service", name)]
        pod_labels = found[("Deployment", name)]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items(), name
        (container, *_) = found[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
        port_names = {p["name"] for p in container["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    # Every replica reaches the one Redis through its Service, as the config says.
    redis_port = found[("Service", "redis")]["spec"]["ports"][0]["port"]
    config = load_yaml(DEPLOY / "specgate.gpu.yaml")
    assert config["redis_url"].startswith(f"redis://redis:{redis_port}/")
    policy = found[("NetworkPolicy", "redis-from-gateway")]["spec"]
    assert policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"].items() <= \
        gateway_pod()["metadata"]["labels"].items()


def test_servicemonitor_scrapes_the_gateway_service() -> None:
    monitor = objects()[("ServiceMonitor", "specgate")]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = objects()[("Service", "specgate")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    assert "http" in port_names
    # The Prometheus Operator names the job after the Service; the alerts expect it.
    assert service["metadata"]["name"] == "specgate"


def test_production_config_is_valid_settings(tmp_path: Path) -> None:
    # The keys file exists only where the Secret is mounted; here, a stand-in.
    keys = tmp_path / "api-keys"
    keys.write_text("# callers\n" + "k" * 32 + "\n")
    assert load_yaml(DEPLOY / "specgate.gpu.yaml")["api_keys_file"]
    settings = Settings(config=DEPLOY / "specgate.gpu.yaml",
                        api_keys_file=keys)  # type: ignore[call-arg]
    modes = settings.resolved_modes()
    assert set(modes) == {"standard", "eagle3", "dflash"}
    assert modes["eagle3"].method == "eagle3" and modes["dflash"].method == "dflash"
    assert settings.model == "/models/Llama-3.1-8B-Instruct"
    assert settings.admin_key is None  # keys come from the environment, not the file
    assert settings.api_keys_file is not None   # /v1 is protected in production

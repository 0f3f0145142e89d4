"""Remote engines: modes served by real `vllm serve` processes behind the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.embedded import prepare_embedded
from service.settings import Settings
from tests.conftest import free_port
from tests.redis_server import RedisServer

KEY = "remote-admin"
AUTH = {"Authorization": f"Bearer {KEY}"}
COUNTING = ", ".join(str(i) for i in range(1, 30)) + ","   # greedy: counts to max_tokens
COPY = ("Repeat this text exactly: the quick brown fox jumps over the lazy dog near the "
        "quiet river bank, while the old miller counts his sacks of golden wheat.")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path, path: str,
          limit_s: float = 600) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{url} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + path, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"{url}{path} not ready:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def vllm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    model = prepare_embedded(Settings().cache_dir, lambda _: None)
    specs = {"standard": None,
             "ngram": '{"method": "ngram", "num_speculative_tokens": 4, '
                      '"prompt_lookup_max": 4, "prompt_lookup_min": 2}'}
    procs, urls, logs = [], {}, {}
    for core, (mode, spec) in enumerate(specs.items()):
        port = free_port()
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(model.target_dir), "--served-model-name", "smollm2",
               "--port", str(port), "--host", "127.0.0.1", "--enforce-eager",
               "--max-model-len", "1024", "--dtype", "float32",
               "--kv-cache-memory-bytes", str(256 * 1024**2)]
        if spec:
            cmd += ["--speculative-config", spec, "--per-request-spec-decode-metrics", "summary"]
        log = tmp_path_factory.mktemp(mode) / "vllm.log"
        env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": str(core % (os.cpu_count() or 1)),
               "HF_HUB_OFFLINE": "1"}
        with log.open("w") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        urls[mode], logs[mode] = f"http://127.0.0.1:{port}", log
    try:
        for (mode, url), proc in zip(urls.items(), procs, strict=True):
            _wait(url, proc, logs[mode], "/health")
        yield urls
    finally:
        for proc in procs:
            _kill(proc)


def _start_gateway(urls: dict[str, str], redis_url: str, name: str,
                   tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    config = tmp / f"{name}.yaml"
    config.write_text(
        "modes:\n"
        f"  standard: {{url: '{urls['standard']}'}}\n"
        f"  ngram: {{url: '{urls['ngram']}', method: ngram, num_speculative_tokens: 4}}\n")
    port = free_port()
    env = {**os.environ, "SPECGATE_CONFIG": str(config), "SPECGATE_PORT": str(port),
           "SPECGATE_REDIS_URL": redis_url, "SPECGATE_ADMIN_KEY": KEY,
           "SPECGATE_REPLICA_ID": name, "SPECGATE_MAX_MODEL_LEN": "1024", "HF_HUB_OFFLINE": "1"}
    log = tmp / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    _wait(url, proc, log, "/ready", limit_s=300)
    return proc, url, log


@pytest.fixture(scope="module")
def gateways(vllm_servers: dict[str, str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    redis = RedisServer()
    redis.start()
    tmp = tmp_path_factory.mktemp("gateways")
    started = []
    try:
        for name in ("gw-a", "gw-b"):
            started.append(_start_gateway(vllm_servers, redis.url, name, tmp))
        yield [url for _, url, _ in started]
    finally:
        for proc, _, _ in started:
            _kill(proc)
        redis.kill()


def remote_running(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text)
               if f.name == "vllm:num_requests_running" for s in f.samples)


async def test_remote_modes_serve_identically(gateways: list[str]) -> None:
    c = openai.AsyncOpenAI(base_url=gateways[0] + "/v1", api_key="x", max_retries=0, timeout=600)
    texts = {}
    for mode in ("standard", "ngram"):
        raw = await c.chat.completions.with_raw_response.create(
            model="SmolLM2-135M-Instruct", temperature=0, max_tokens=24,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            extra_headers={"x-spec-mode": mode})
        assert raw.headers["x-spec-mode"] == mode
        reply = raw.parse()
        texts[mode] = reply.choices[0].message.content
        assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert "Paris" in (texts["standard"] or "")
    assert texts["ngram"] == texts["standard"]
    stream = await c.chat.completions.create(
        model="SmolLM2-135M-Instruct", temperature=0, max_tokens=24, stream=True,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        extra_headers={"x-spec-mode": "ngram"})
    assert "".join([ch.choices[0].delta.content or "" async for ch in stream
                    if ch.choices]) == texts["standard"]
    await c.close()


async def test_acceptance_from_remote_metrics_shared_by_both_gateways(
        gateways: list[str]) -> None:
    a, b = gateways
    async with httpx.AsyncClient(timeout=300) as h:
        for _ in range(3):
            r = await h.post(a + "/v1/chat/completions", headers={
                "x-spec-mode": "ngram", "x-workload-class": "copy"}, json={
                "model": "SmolLM2-135M-Instruct", "temperature": 0, "max_tokens": 48,
                "messages": [{"role": "user", "content": COPY}]})
            assert r.status_code == 200
        await asyncio.sleep(2.5)                    # a few metric polls and store syncs
        spec = (await h.get(a + "/ready")).json()["engines"]["ngram"]["spec_decode"]
        assert spec["drafts"] > 0 and spec["accepted_tokens"] > 0   # from vLLM's /metrics
        policy = (await h.get(b + "/admin/policy", headers=AUTH)).json()
        learned = policy["acceptance"]["copy"]["ngram"]               # per-request metrics,
        assert learned["requests"] == pytest.approx(3, rel=0.05)      # learned on A, seen on B
        assert learned["mean_accepted_length"] > 1.0
        assert set(policy["replicas"]) == {"gw-a", "gw-b"}


async def test_disconnect_aborts_on_the_remote_server(gateways: list[str],
                                                      vllm_servers: dict[str, str]) -> None:
    async with httpx.AsyncClient(timeout=300) as h:
        body = {"model": "SmolLM2-135M-Instruct", "max_tokens": 600, "stream": True,
                "temperature": 0, "prompt": COUNTING}
        async with h.stream("POST", gateways[1] + "/v1/completions", json=body,
                            headers={"x-spec-mode": "standard"}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if '"text":"' in line and '"text":""' not in line:
                    break
            assert remote_running(vllm_servers["standard"]) == 1
    deadline = time.monotonic() + 15
    while remote_running(vllm_servers["standard"]) != 0:
        assert time.monotonic() < deadline, "the remote request kept running"
        await asyncio.sleep(0.25)

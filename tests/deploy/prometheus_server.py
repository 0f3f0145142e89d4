"""A private, real Prometheus (the Debian binary) on a free port, with a temporary
config and storage, for the dashboard and alert tests."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import free_port
from tests.deploy.files import require_tool


class PrometheusServer:
    def __init__(self, workdir: Path, target: str, rule_files: list[Path]) -> None:
        self.binary = require_tool("prometheus")
        self.workdir = workdir
        self.port = free_port()
        self.log = workdir / "prometheus.log"
        config = {
            # As fast as Prometheus goes, so a test sees several scrapes in seconds.
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            # The alert rules expect the job to be named "specgate".
            "scrape_configs": [{"job_name": "specgate",
                                "static_configs": [{"targets": [target]}]}],
        }
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    async def wait_ready(self, client: httpx.AsyncClient, timeout_s: float = 20.0) -> None:
        """Until /-/ready answers 200 (the API answers 503 in plain text before)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log_tail()}")
            try:
                if (await client.get(f"{self.url}/-/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError(f"prometheus not ready in {timeout_s} s:\n{self.log_tail()}")

    async def api(self, client: httpx.AsyncClient, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the whole JSON answer (status, data or error)."""
        r = await client.get(f"{self.url}/api/v1/{path}", params=params)
        return r.json()

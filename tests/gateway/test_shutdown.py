"""Graceful shutdown: refuse new work, let admitted requests finish, end the rest cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

import httpx

from gateway.app import create_app
from gateway.shutdown import DrainingServer, http_server
from service.runtime import Components
from service.settings import Settings
from tests.conftest import FAKE_MODE_INFO, MODEL, free_port
from tests.fakes.engine import FakeEngine, FakeTokenizer
from tests.fakes.gated import GatedEngine, gated_engines, wait_until
from tests.gateway.test_keepalive import read_until

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Served:
    client: httpx.AsyncClient
    engines: dict[str, FakeEngine]
    server: DrainingServer
    task: asyncio.Task[None]

    def sigterm(self) -> None:
        # What uvicorn's SIGTERM handler does (raising the real signal would
        # reach the test process: uvicorn re-raises it after shutdown).
        self.server.should_exit = True


@asynccontextmanager
async def draining(engines: dict[str, FakeEngine], drain_s: float) -> AsyncIterator[Served]:
    components = Components(model_name=MODEL, tokenizer=FakeTokenizer(), engines=engines,
                            max_model_len=4096, mode_info=FAKE_MODE_INFO)
    port = free_port()
    settings = Settings(policy={"name": "rule"}, drain_timeout_s=drain_s,  # type: ignore[arg-type]
                        host="127.0.0.1", port=port, log_level="warning")
    server = http_server(create_app(settings, components=components), settings)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
        await wait_until(lambda: all(e.started for e in engines.values()))
        served = Served(client, engines, server, task)
        try:
            yield served
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=30)


async def test_drain_refuses_new_work_and_lets_admitted_requests_finish() -> None:
    async with draining(gated_engines(), drain_s=60) as s:
        engine = cast(GatedEngine, s.engines["dflash"])
        held = asyncio.create_task(s.client.post(
            "/v1/chat/completions", headers={"x-spec-mode": "dflash"}, json=CHAT))
        await wait_until(lambda: bool(engine.waiting))
        assert (await s.client.get("/ready")).status_code == 200
        s.sigterm()
        # Still listening while it drains: new connections are answered, with 503s.
        async with httpx.AsyncClient(base_url=str(s.client.base_url)) as fresh:
            for _ in range(1000):
                ready = await fresh.get("/ready")
                if ready.status_code == 503:
                    break
                await asyncio.sleep(0.01)
            assert ready.status_code == 503 and ready.json()["status"] == "draining"
            for body in (CHAT, {**CHAT, "stream": True}):
                r = await fresh.post("/v1/chat/completions", json=body)
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                assert r.json()["error"]["code"] == "shutting_down"
            metrics = (await fresh.get("/metrics")).text
            assert "specgate_draining 1.0" in metrics
        assert not s.task.done()  # waiting for the admitted request
        engine.gate.set()
        reply = await held
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 5
        await asyncio.wait_for(s.task, timeout=30)
        assert not engine.aborted


async def test_drain_timeout_ends_what_is_left_cleanly() -> None:
    engines = {"standard": FakeEngine("standard", token_delay_s=0.05),
               "dflash": FakeEngine("dflash", token_delay_s=0.05)}
    long = {**CHAT, "max_tokens": 2000}  # 100 s of tokens against a 0.5 s drain
    async with draining(engines, drain_s=0.5) as s:
        plain = asyncio.create_task(s.client.post(
            "/v1/chat/completions", headers={"x-spec-mode": "standard"}, json=long))
        async with s.client.stream("POST", "/v1/chat/completions", json={**long, "stream": True},
                                   headers={"x-spec-mode": "dflash"}) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            await asyncio.wait_for(read_until(lines, '"content":" the"'), timeout=10)
            s.sigterm()
            rest = await asyncio.wait_for(read_until(lines, "[DONE]"), timeout=20)
        events = [line[6:] for line in rest if line.startswith("data: {")]
        error = json.loads(events[-1])["error"]
        assert error["code"] == "shutting_down" and error["type"] == "server_error"
        reply = await asyncio.wait_for(plain, timeout=20)
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "shutting_down"
        await asyncio.wait_for(s.task, timeout=30)
        for engine in engines.values():
            assert len(engine.aborted) == 1 and not engine.running


async def test_sigterm_to_the_process() -> None:
    """The real signal, to a real process served like ``specgate serve`` serves."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.serve_fake", str(port), "0.5", cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as c:
            for _ in range(3000):
                try:
                    if (await c.get("/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.01)
            async with c.stream("POST", "/v1/completions", json={
                    "model": MODEL, "prompt": "x", "max_tokens": 2000, "stream": True}) as r:
                assert r.status_code == 200
                lines = r.aiter_lines()
                await asyncio.wait_for(read_until(lines, '"text":" the"'), timeout=10)
                proc.send_signal(signal.SIGTERM)
                rest = await asyncio.wait_for(read_until(lines, "[DONE]"), timeout=20)
        assert any('"code":"shutting_down"' in line for line in rest)
        output, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
        assert proc.returncode in (0, -signal.SIGTERM), output.decode(errors="replace")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

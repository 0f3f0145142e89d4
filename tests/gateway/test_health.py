"""Liveness, readiness and the model list."""

from __future__ import annotations

import asyncio

import httpx

from gateway.app import create_app
from service.runtime import Components
from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, free_port
from tests.fakes.engine import FakeEngine, FakeTokenizer


async def test_health_ready_models(gateway: FakeGateway) -> None:
    assert (await gateway.client.get("/health")).json() == {"status": "ok"}
    ready = await gateway.client.get("/ready")
    assert ready.status_code == 200
    assert set(ready.json()["engines"]) == {"standard", "ngram", "eagle3", "dflash"}
    models = (await gateway.client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert (await gateway.client.get(f"/v1/models/{MODEL}")).json()["id"] == MODEL
    assert (await gateway.client.get("/v1/models/other")).status_code == 404


class SlowStartEngine(FakeEngine):
    def __init__(self, mode: str, gate: asyncio.Event) -> None:
        super().__init__(mode)
        self.gate = gate

    async def start(self) -> None:
        await self.gate.wait()
        await super().start()


async def test_not_ready_while_engines_start() -> None:
    import uvicorn

    gate = asyncio.Event()
    components = Components(MODEL, FakeTokenizer(), {"standard": SlowStartEngine("standard", gate)},
                            max_model_len=64)
    app = create_app(Settings(), components=components)
    server = uvicorn.Server(uvicorn.Config(app, port=free_port(), log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.config.port}") as client:
        assert (await client.get("/health")).status_code == 200
        ready = await client.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["phase"] == "starting engine standard"
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert r.status_code == 503
        gate.set()
        for _ in range(100):
            if (await client.get("/ready")).status_code == 200:
                break
            await asyncio.sleep(0.01)
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert r.status_code == 200
    server.should_exit = True
    await task


async def test_an_engine_that_never_starts_is_reported_failed_within_its_bound() -> None:
    """A hung engine start (a worker that never loads) must not leave the gateway
    "starting" for ever: past ``engine_start_timeout_s`` /ready says which engine failed."""
    import uvicorn

    never = asyncio.Event()
    components = Components(MODEL, FakeTokenizer(), {"standard": SlowStartEngine("standard",
                                                                                 never)},
                            max_model_len=64)
    app = create_app(Settings(engine_start_timeout_s=0.3), components=components)
    server = uvicorn.Server(uvicorn.Config(app, port=free_port(), log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.config.port}") as client:
        for _ in range(300):
            ready = await client.get("/ready")
            if ready.json()["phase"] == "failed":
                break
            await asyncio.sleep(0.01)
        assert ready.status_code == 503
        assert "engine 'standard' did not start within 0.3 s" in ready.json()["error"]
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_engine_available"
    server.should_exit = True
    await task

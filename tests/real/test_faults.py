"""Faults under load, against real parts: vLLM CPU engines, a real redis-server,
the official ``openai`` client over real HTTP.

A gateway of its own (plain decoding and n-gram, to start quickly), sharing a
private Redis that the tests kill, and whose engine-core process one test
kills. The engine test runs last: it takes an engine down on purpose.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import psutil
import pytest

from bench.gateway_process import GatewayProcess
from tests.redis_server import RedisServer

MODES = {"standard": {},
         "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                   "prompt_lookup_min": 2}}
PROMPT = "Count from one to fifty in words, separated by commas."


@dataclass
class FaultGateway:
    process: GatewayProcess
    redis: RedisServer
    model: str

    @property
    def url(self) -> str:
        return self.process.url

    def client(self, **kw: object) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="unused",
                                  max_retries=0, timeout=300, **kw)  # type: ignore[arg-type]

    def ready(self) -> httpx.Response:
        return httpx.get(self.url + "/ready", timeout=10)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=10).text

    def engines(self) -> dict[str, dict]:  # type: ignore[type-arg]
        return self.ready().json()["engines"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultGateway]:
    redis = RedisServer()
    redis.start()
    log = tmp_path_factory.mktemp("faults") / "specgate.log"
    env = {"SPECGATE_MODES": json.dumps(MODES), "SPECGATE_MAX_MODEL_LEN": "1024",
           "SPECGATE_REDIS_URL": redis.url, "SPECGATE_REDIS_TIMEOUT_S": "0.2"}
    try:
        with GatewayProcess(log, env) as process:
            model = httpx.get(process.url + "/v1/models").json()["data"][0]["id"]
            yield FaultGateway(process, redis, model)
    finally:
        redis.kill()


async def chat(g: FaultGateway, client: openai.AsyncOpenAI, *, mode: str | None = None,
               stream: bool = False, max_tokens: int = 24) -> str:
    headers = {"x-spec-mode": mode} if mode else {}
    messages = [{"role": "user", "content": PROMPT}]
    if not stream:
        r = await client.chat.completions.create(
            model=g.model, messages=messages, max_tokens=max_tokens, temperature=0,
            extra_headers=headers)  # type: ignore[arg-type]
        assert r.usage is not None and r.usage.completion_tokens > 0
        return r.choices[0].message.content or ""
    text = ""
    s = await client.chat.completions.create(
        model=g.model, messages=messages, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_headers=headers)  # type: ignore[arg-type]
    usage = None
    async for chunk in s:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert usage is not None and usage.completion_tokens > 0
    return text


async def count_on(g: FaultGateway, client: openai.AsyncOpenAI, mode: str, *,
                   stream: bool, max_tokens: int = 600) -> str:
    """A long, deterministic generation: the model keeps counting until max_tokens
    (``ignore_eos``: a count that happens to reach an end-of-sequence token must not
    end the request early; the tests kill engines under these)."""
    prompt = ", ".join(str(i) for i in range(1, 30)) + ","
    headers = {"x-spec-mode": mode}
    if not stream:
        r = await client.completions.create(model=g.model, prompt=prompt,
                                            max_tokens=max_tokens, temperature=0,
                                            extra_headers=headers,
                                            extra_body={"ignore_eos": True})
        return r.choices[0].text
    text = ""
    s = await client.completions.create(model=g.model, prompt=prompt, max_tokens=max_tokens,
                                        temperature=0, stream=True, extra_headers=headers,
                                        extra_body={"ignore_eos": True})
    async for chunk in s:
        text += chunk.choices[0].text if chunk.choices else ""
    return text


async def wait_until(what: str, check: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):  # type: ignore[arg-type]
            return
        await asyncio.sleep(0.25)
    pytest.fail(f"not within {timeout_s} s: {what}")


def nothing_running(g: FaultGateway) -> bool:
    return all(e["in_flight"] == 0 and e["running"] == 0 and e["waiting"] == 0
               for e in g.engines().values())


async def test_redis_killed_and_restarted_under_load_fails_nothing(gateway: FaultGateway) -> None:
    results: list[str | BaseException] = []
    stop = asyncio.Event()

    async def caller(i: int) -> None:
        while not stop.is_set():
            try:
                results.append(await chat(gateway, client, stream=i % 2 == 0, max_tokens=8))
            except Exception as e:
                results.append(e)

    client = gateway.client()
    callers = [asyncio.create_task(caller(i)) for i in range(4)]
    await asyncio.sleep(3)
    gateway.redis.kill()
    await wait_until("/ready reports the store down",
                     lambda: gateway.ready().json()["policy_store"]["up"] is False, 30)
    await asyncio.sleep(3)
    gateway.redis.start()       # same port: the replica reconnects by itself
    await wait_until("/ready reports the store back",
                     lambda: gateway.ready().json()["policy_store"]["up"] is True, 60)
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*callers)
    await client.close()
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures[:3]
    assert len(results) >= 8 and all(results)


async def test_burst_of_disconnects_leaves_nothing_running(gateway: FaultGateway) -> None:
    async def leave_mid_stream(i: int) -> None:
        body = {"model": gateway.model, "stream": True, "max_tokens": 400, "temperature": 0,
                "messages": [{"role": "user", "content": PROMPT}]}
        headers = {"x-spec-mode": ("standard", "ngram", "auto")[i % 3]}
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http, \
                http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status_code == 200
            chunks = 0
            async for line in r.aiter_lines():
                chunks += line.startswith("data: {")
                if chunks >= 2:
                    break       # leave: the connection closes with the client

    await asyncio.gather(*(leave_mid_stream(i) for i in range(12)))
    await wait_until("no request left in any engine", lambda: nothing_running(gateway), 60)
    # And the gateway still serves.
    async with gateway.client() as client:
        assert await chat(gateway, client, max_tokens=4)


async def test_a_client_that_stops_reading_costs_bounded_memory_and_no_one_else(
        gateway: FaultGateway) -> None:
    gateway_proc = psutil.Process(gateway.process.pid)
    rss_before = gateway_proc.memory_info().rss
    # A raw socket with a small receive buffer that reads the response head and
    # then nothing more, while the engine generates a long answer for it.
    sock = socket.create_connection(("127.0.0.1", gateway.process.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = json.dumps({"model": gateway.model, "stream": True, "max_tokens": 900, "n": 4,
                       "temperature": 1.0, "seed": 1,
                       "messages": [{"role": "user", "content": PROMPT}]}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nx-spec-mode: standard\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert sock.recv(12).startswith(b"HTTP/1.1 200")
    try:
        began = time.monotonic()
        async with gateway.client() as client:
            answers = await asyncio.gather(*(
                chat(gateway, client, mode=m, stream=s, max_tokens=16)
                for m in ("standard", "ngram") for s in (False, True)))
        assert all(answers)
        # Generous: other clients are served while the slow one sits there.
        assert time.monotonic() - began < 120
        rss_after = gateway_proc.memory_info().rss
        assert rss_after - rss_before < 200 * 2**20, (rss_before, rss_after)
    finally:
        sock.close()
    await wait_until("the slow client's request ended", lambda: nothing_running(gateway), 120)


def engine_core_pids(gateway_pid: int) -> list[int]:
    """The engine-core child processes, in start order (engines start one at a time,
    in the order the modes are configured)."""
    cores = [p for p in psutil.Process(gateway_pid).children(recursive=True)
             if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()]
    return [p.pid for p in sorted(cores, key=lambda p: p.create_time())]


IN_FLIGHT = 16
FAILOVER_TOKENS = 200


async def test_an_engine_killed_under_load_loses_no_request(gateway: FaultGateway) -> None:
    """16 requests in flight on the n-gram engine, streamed and not, when its core process
    is killed: each continues on plain decoding (service/failover.py) with the greedy
    text an undisturbed request gets, and the engine is restarted."""
    pids = engine_core_pids(gateway.process.pid)
    assert len(pids) == len(MODES), pids
    ngram_core = pids[1]
    async with gateway.client() as client:
        undisturbed = await count_on(gateway, client, "ngram", stream=False,
                                     max_tokens=FAILOVER_TOKENS)
        in_flight = [asyncio.create_task(count_on(gateway, client, "ngram", stream=i % 2 == 1,
                                                  max_tokens=FAILOVER_TOKENS))
                     for i in range(IN_FLIGHT)]
        await wait_until("the requests are in the engine",
                         lambda: gateway.engines()["ngram"]["in_flight"] >= IN_FLIGHT, 60)
        await asyncio.sleep(0.5)   # generating, far from their last token
        assert not any(t.done() for t in in_flight)
        os.kill(ngram_core, signal.SIGKILL)

        # /ready shows the engine down while the supervisor reloads it (many seconds).
        await wait_until("the n-gram engine is down", lambda: not gateway.engines()["ngram"]["up"],
                         30)
        # Meanwhile new auto requests go to the healthy mode; the dead one, forced, is a
        # clear 503.
        raw = await client.chat.completions.with_raw_response.create(
            model=gateway.model, messages=[{"role": "user", "content": PROMPT}], max_tokens=4)
        assert raw.headers["x-spec-mode"] == "standard"
        with pytest.raises(openai.APIStatusError) as e:
            await client.chat.completions.create(
                model=gateway.model, messages=[{"role": "user", "content": PROMPT}],
                max_tokens=4, extra_headers={"x-spec-mode": "ngram"})
        assert e.value.status_code == 503
        texts = await asyncio.wait_for(asyncio.gather(*in_flight), 300)
        assert texts == [undisturbed] * IN_FLIGHT
        metrics = await asyncio.to_thread(gateway.metrics)
        assert f'specgate_failovers_total{{source="ngram",target="standard"}} ' \
            f'{float(IN_FLIGHT)}' in metrics

        # The supervisor restarts the engine: ready again, and it serves.
        await wait_until("the n-gram engine is restarted",
                         lambda: gateway.ready().status_code == 200, 300)
        assert engine_core_pids(gateway.process.pid)[-1] != ngram_core
        assert await chat(gateway, client, mode="ngram", max_tokens=4)
        # The kind of request it died serving (ignore_eos) is kept off it a while.
        assert ["ignore_eos"] in gateway.engines()["ngram"]["held_off"]
    metrics = await asyncio.to_thread(gateway.metrics)
    assert 'specgate_engine_restarts_total{mode="ngram",outcome="ok"} 1.0' in metrics
    assert nothing_running(gateway)

"""The x-spec-mode header and the x-spec-mode / x-spec-decision response headers."""

from __future__ import annotations

import pytest

from tests.conftest import MODEL, FakeGateway

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("mode", ["standard", "ngram", "eagle3", "dflash"])
async def test_forced_mode_serves_and_says_so(gateway: FakeGateway, mode: str) -> None:
    for stream in (False, True):
        r = await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": mode},
                                      json={**CHAT, "max_tokens": 100, "stream": stream})
        assert r.status_code == 200
        assert r.headers["x-spec-mode"] == mode
        assert r.headers["x-spec-decision"] == "override"
    assert len(gateway.engines[mode].served) == 2
    others = [e for name, e in gateway.engines.items() if name != mode]
    assert not any(e.served for e in others)


async def test_header_is_case_insensitive_and_auto_is_default(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/completions", headers={"x-spec-mode": "DFlash"},
                                  json={"model": MODEL, "prompt": "x"})
    assert r.headers["x-spec-mode"] == "dflash"
    r = await gateway.client.post("/v1/completions", headers={"x-spec-mode": "auto"},
                                  json={"model": MODEL, "prompt": "x", "max_tokens": 10})
    assert r.headers["x-spec-decision"] == "rule:max_tokens<50"
    assert r.headers["x-spec-mode"] == "standard"


async def test_auto_follows_measured_acceptance(gateway: FakeGateway) -> None:
    # Before DFlash has measured anything, the rule prefers EAGLE-3 for long outputs.
    r = await gateway.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 60})
    assert (r.headers["x-spec-mode"], r.headers["x-spec-decision"]) == ("eagle3", "rule:eagle3")
    # Forced DFlash traffic measures its acceptance (the fake accepts 80%).
    await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "dflash"},
                              json={**CHAT, "max_tokens": 60})
    r = await gateway.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 60})
    assert r.headers["x-spec-mode"] == "dflash"
    assert r.headers["x-spec-decision"] == "rule:dflash_acceptance>0.7"


async def test_forced_mode_that_is_down_is_503_and_auto_avoids_it(gateway: FakeGateway) -> None:
    await gateway.engines["eagle3"].shutdown()
    r = await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "eagle3"},
                                  json={**CHAT, "max_tokens": 60})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "mode_unavailable"
    assert r.headers["retry-after"] == "1"
    r = await gateway.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 60})
    assert r.status_code == 200
    assert r.headers["x-spec-mode"] == "standard"
    assert r.headers["x-spec-decision"] == "rule:no_drafter"
    ready = await gateway.client.get("/ready")
    assert ready.status_code == 503
    assert ready.json()["engines"]["eagle3"]["up"] is False


async def test_no_engine_up_is_503(gateway: FakeGateway) -> None:
    for engine in gateway.engines.values():
        await engine.shutdown()
    r = await gateway.client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "no_engine_available"

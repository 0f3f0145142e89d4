"""Auto routing with the adaptive policy, through the gateway with fake engines."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve


@pytest.fixture
async def adaptive(request: pytest.FixtureRequest) -> AsyncIterator[FakeGateway]:
    settings = Settings(policy={"adaptive": {"exploration_share": 0.0}})  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=settings):
        yield g


def chat(max_tokens: int = 100) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens}


async def test_decision_header_gives_reason_and_margin(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 200
    reason = r.headers["x-spec-decision"]
    assert reason.split(":")[0] in {"cost", "hold"}
    assert reason.endswith("%")


async def test_forced_traffic_teaches_auto(adaptive: FakeGateway) -> None:
    """The fakes accept 80% (dflash) vs 30% (eagle3) and 60% (ngram) of drafts."""
    for mode in ("eagle3", "ngram", "dflash"):
        for _ in range(6):
            r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                           headers={"x-spec-mode": mode,
                                                    "x-workload-class": "code"})
            assert r.headers["x-spec-decision"] == "override"
    r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                   headers={"x-workload-class": "code"})
    assert r.headers["x-spec-mode"] == "dflash"


async def test_short_outputs_go_plain(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat(max_tokens=1))
    assert r.headers["x-spec-mode"] == "standard"


async def test_bad_workload_class_is_400(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                   headers={"x-workload-class": "no spaces allowed"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-workload-class"
    body = {**chat(), "metadata": {"workload_class": "x" * 100}}
    r = await adaptive.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "metadata.workload_class"

"""The admin API: auth, reading beliefs, validated live changes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve

KEY = "s3cret-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
async def adaptive_gateway() -> AsyncIterator[FakeGateway]:
    settings = Settings(admin_key=KEY)  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=settings):
        yield g


async def test_admin_disabled_without_key(gateway: FakeGateway) -> None:
    r = await gateway.client.get("/admin/policy", headers=AUTH)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "admin_disabled"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": KEY}, {"Authorization": "Basic " + KEY}])
async def test_admin_rejects_bad_credentials(adaptive_gateway: FakeGateway,
                                             headers: dict[str, str]) -> None:
    for method in ("GET", "PUT"):
        r = await adaptive_gateway.client.request(method, "/admin/policy", headers=headers,
                                                  json={"hysteresis": 0.5})
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
        assert KEY not in r.text


async def test_get_policy_shows_settings_beliefs_and_load(adaptive_gateway: FakeGateway) -> None:
    for _ in range(3):
        await adaptive_gateway.client.post(
            "/v1/chat/completions", headers={"x-spec-mode": "dflash", "x-workload-class": "math"},
            json={"model": MODEL, "messages": [{"role": "user", "content": "1+1"}],
                  "max_tokens": 8})
    body = (await adaptive_gateway.client.get("/admin/policy", headers=AUTH)).json()
    assert body["policy"] == "adaptive"
    assert body["settings"]["exploration_share"] == 0.03
    assert set(body["load"]) == {"standard", "ngram", "eagle3", "dflash"}
    learned = body["acceptance"]["math"]["dflash"]
    assert learned["requests"] == pytest.approx(3, rel=0.01)
    assert learned["acceptance_rate"] == pytest.approx(0.8, abs=0.05)
    assert body["expected_output_tokens"]["math"] == pytest.approx(8)
    assert body["store"]["up"] is True


async def test_put_policy_validates_and_applies(adaptive_gateway: FakeGateway) -> None:
    c = adaptive_gateway.client
    for patch, field in [({"exploration_share": 2}, "exploration_share"),
                         ({"hysteresis": "lots"}, "hysteresis"),
                         ({"no_such_setting": 1}, "no_such_setting"),
                         ({"enabled_modes": ["warp"]}, "enabled_modes"),
                         ({"priors": {"eagle3": {"mean_accepted_length": 0.5,
                                                 "draft_overhead": 0}}},
                          "priors.eagle3.mean_accepted_length")]:
        r = await c.put("/admin/policy", headers=AUTH, json=patch)
        assert r.status_code == 422, (patch, r.text)
        assert r.json()["error"]["param"] == field
    r = await c.put("/admin/policy", headers=AUTH, content=b"{oops")
    assert r.status_code == 400
    r = await c.put("/admin/policy", headers=AUTH, json={"enabled_modes": ["ngram"]})
    assert r.status_code == 200 and r.json()["settings"]["enabled_modes"] == ["ngram"]
    version = r.json()["settings_version"]
    reply = await c.post("/v1/chat/completions",
                         json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert reply.headers["x-spec-mode"] == "ngram"
    body = (await c.get("/admin/policy", headers=AUTH)).json()
    assert body["settings_version"] == version
    assert body["settings"]["exploration_share"] == 0.03  # untouched settings kept

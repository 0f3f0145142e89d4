"""API keys on /v1/*: the official client's view, the 401 envelope, public endpoints."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from pydantic import ValidationError

from gateway.cli import _parser, load_settings, main
from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.gateway.test_metrics import scrape, value

KEY_A = "sk-test-aaaaaaaaaaaa"
KEY_B = "sk-test-bbbbbbbbbbbb"
ADMIN = "admin-key-cccccccccc"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def settings(**extra: object) -> Settings:
    return Settings(policy={"name": "rule"}, api_keys=[KEY_A, KEY_B],  # type: ignore[arg-type]
                    admin_key=ADMIN, **extra)


@pytest.fixture
async def keyed() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines(), settings=settings()):
        yield g


def client(g: FakeGateway, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0)


async def test_openai_client_with_a_right_key_works(keyed: FakeGateway) -> None:
    for key in (KEY_A, KEY_B):
        async with client(keyed, key) as c:
            reply = await c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
            assert reply.choices[0].message.content == " the quick brown"
            models = await c.models.list()
            assert [m.id for m in models.data] == [MODEL]


@pytest.mark.parametrize("key", ["sk-test-wrong-key", KEY_A + "x", KEY_A[:-1], ADMIN])
async def test_openai_client_with_a_wrong_key_gets_authentication_error(
        keyed: FakeGateway, key: str) -> None:
    async with client(keyed, key) as c:
        with pytest.raises(openai.AuthenticationError) as exc:
            await c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert exc.value.status_code == 401
        assert exc.value.code == "invalid_api_key"
        assert key not in str(exc.value)
        with pytest.raises(openai.AuthenticationError):
            await c.models.list()
    assert not any(e.served for e in keyed.engines.values())


@pytest.mark.parametrize("headers, code", [
    ({}, "missing_api_key"),
    ({"Authorization": "Bearer"}, "missing_api_key"),
    ({"Authorization": KEY_A}, "missing_api_key"),
    ({"Authorization": f"Basic {KEY_A}"}, "missing_api_key"),
    ({"Authorization": "Bearer nope-nope-nope"}, "invalid_api_key"),
])
async def test_401_is_the_openai_envelope(keyed: FakeGateway, headers: dict[str, str],
                                          code: str) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        r = await keyed.client.post(path, json=CHAT, headers=headers)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json() == {"error": {"message": r.json()["error"]["message"],
                                      "type": "authentication_error", "param": None,
                                      "code": code}}
        assert "Authorization: Bearer" in r.json()["error"]["message"] or code != "missing_api_key"
        assert KEY_A not in r.text
    for path in ("/v1/models", f"/v1/models/{MODEL}", "/v1/no-such-route"):
        assert (await keyed.client.get(path, headers=headers)).status_code == 401


async def test_key_is_checked_before_the_body_is_read(keyed: FakeGateway) -> None:
    # Invalid JSON and an oversized body: without a key, neither is looked at.
    r = await keyed.client.post("/v1/chat/completions", content=b"{not json")
    assert r.status_code == 401
    r = await keyed.client.post("/v1/completions", content=b"x" * (5 * 1024 * 1024))
    assert r.status_code == 401
    r = await keyed.client.post("/v1/chat/completions", content=b"{not json",
                                headers={"Authorization": f"Bearer {KEY_A}"})
    assert r.status_code == 400


async def test_operational_endpoints_are_public_by_default(keyed: FakeGateway) -> None:
    for path in ("/health", "/ready", "/metrics"):
        assert (await keyed.client.get(path)).status_code == 200, path


async def test_protected_operational_endpoints() -> None:
    async for g in serve(fake_engines(), settings=settings(public_endpoints=["/health"])):
        assert (await g.client.get("/health")).status_code == 200
        for path in ("/ready", "/metrics"):
            r = await g.client.get(path)
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
            r = await g.client.get(path, headers={"Authorization": f"Bearer {KEY_B}"})
            assert r.status_code == 200, path


async def test_admin_key_and_api_keys_are_separate(keyed: FakeGateway) -> None:
    r = await keyed.client.get("/admin/policy", headers={"Authorization": f"Bearer {KEY_A}"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_admin_key"
    r = await keyed.client.get("/admin/policy")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_admin_key"
    assert r.headers["www-authenticate"] == "Bearer"
    r = await keyed.client.get("/admin/policy", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200


async def test_rejections_are_counted_and_keys_never_logged(
        keyed: FakeGateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for key in ("wrong-key-one-1", "wrong-key-two-2"):
        await keyed.client.post("/v1/completions", json={"model": MODEL, "prompt": "x"},
                                headers={"Authorization": f"Bearer {key}"})
    await keyed.client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    ok = await keyed.client.post("/v1/completions", json={"model": MODEL, "prompt": "x"},
                                 headers={"Authorization": f"Bearer {KEY_A}"})
    assert ok.status_code == 200
    samples = await scrape(keyed)
    assert value(samples, "specgate_errors_total", type="authentication_error",
                 code="invalid_api_key") == 2
    assert value(samples, "specgate_errors_total", type="authentication_error",
                 code="missing_api_key") == 1
    assert value(samples, "specgate_requests_total", endpoint="/v1/completions", mode="none",
                 status="401", forced="0") == 3
    for secret in (KEY_A, KEY_B, ADMIN, "wrong-key-one-1"):
        assert secret not in caplog.text


async def test_no_keys_means_open() -> None:
    async for g in serve(fake_engines()):
        assert (await g.client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_keys_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "api-keys"
    path.write_text(f"# team A\n{KEY_A}\n\n# team B\n  {KEY_B}  \n")
    s = Settings(policy={"name": "rule"}, api_keys_file=path)  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=s):
        for key in (KEY_A, KEY_B):
            async with client(g, key) as c:
                reply = await c.completions.create(model=MODEL, prompt="x", max_tokens=2)
                assert reply.choices[0].text == " the quick"
        async with client(g, "# team A") as c:
            with pytest.raises(openai.AuthenticationError):
                await c.completions.create(model=MODEL, prompt="x")


@pytest.mark.parametrize("content, message", [
    (None, "not found"), ("", "holds no keys"), ("# nothing\n\n", "holds no keys")])
def test_bad_key_file_refused_at_start_up(tmp_path: Path, content: str | None,
                                          message: str) -> None:
    path = tmp_path / "api-keys"
    if content is not None:
        path.write_text(content)
    config = tmp_path / "c.yaml"
    config.write_text(f"api_keys_file: {path}\n")
    with pytest.raises(SystemExit) as exc:
        load_settings(_parser().parse_args(["serve", "--config", str(config)]))
    assert "api_keys_file" in str(exc.value.code) and message in str(exc.value.code)


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_API_KEYS", f"{KEY_A},{KEY_B}")
    assert Settings().resolved_api_keys() == [KEY_A, KEY_B]
    monkeypatch.setenv("SPECGATE_API_KEYS", f'["{KEY_B}"]')
    assert Settings().resolved_api_keys() == [KEY_B]
    monkeypatch.setenv("SPECGATE_PUBLIC_ENDPOINTS", "/health,/metrics")
    assert Settings().public_endpoints == ["/health", "/metrics"]


@pytest.mark.parametrize("bad", [
    {"api_keys": ["short"]},
    {"api_keys": ["with space inside"]},
    {"public_endpoints": ["/health"]},                # /ready, /metrics protected by no key
    {"public_endpoints": ["/v1/models"], "api_keys": [KEY_A]},
])
def test_unsafe_auth_settings_refused(bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError) as exc:
        Settings(**bad)
    assert "with space inside" not in str(exc.value.errors()[0]["msg"])


def test_config_check_masks_api_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"api_keys: [{KEY_A}, {KEY_B}]\nadmin_key: {ADMIN}\n")
    main(["config", "check", str(config)])
    out = capsys.readouterr().out
    assert KEY_A not in out and KEY_B not in out and ADMIN not in out
    assert "api_keys:\n- '********'\n- '********'" in out

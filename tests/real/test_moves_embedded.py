"""A request moved between real vLLM engines mid-stream (``service/moves.py``) gives the
greedy text of one that was not moved, as one response to the openai SDK."""

from __future__ import annotations

import httpx
import openai

from tests.real.conftest import ADMIN_KEY, RealGateway

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
PROMPT = "Write a long story about a dragon who learns to bake bread in a small village."
TOKENS = 128


async def test_a_request_moved_mid_stream_keeps_its_greedy_text(
        real_gateway: RealGateway) -> None:
    gw = real_gateway
    messages = [{"role": "user", "content": PROMPT}]
    async with httpx.AsyncClient(base_url=gw.url, timeout=600) as h, \
            openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0) as client:
        reference = await client.chat.completions.create(
            model=gw.model, messages=messages, max_tokens=TOKENS, temperature=0,  # type: ignore[arg-type]
            extra_headers={"x-spec-mode": "standard"})
        assert reference.choices[0].finish_reason == "length"   # long enough to move
        # Auto may only choose plain decoding: the stream starts there.
        r = await h.put("/admin/policy", headers=AUTH, json={
            "enabled_modes": ["standard"], "exploration_share": 0.0})
        assert r.status_code == 200, r.text
        try:
            stream = await client.chat.completions.create(
                model=gw.model, messages=messages, max_tokens=TOKENS, temperature=0,  # type: ignore[arg-type]
                stream=True, stream_options={"include_usage": True})
            assert stream.response.headers["x-spec-mode"] == "standard"
            text, chunks, moved = "", [], False
            async for chunk in stream:
                chunks.append(chunk)
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                # Move early: on a loaded machine the gateway runs well ahead of this
                # reader, and a request with < 32 tokens left is not moved.
                if len(chunks) == 3 and not moved:
                    # Auto now may only choose EAGLE-3: the next auto decision moves
                    # the device group, and the stream with it.
                    r = await h.put("/admin/policy", headers=AUTH,
                                    json={"enabled_modes": ["eagle3"]})
                    assert r.status_code == 200, r.text
                    other = await client.chat.completions.create(
                        model=gw.model, messages=[{"role": "user", "content": "Hi"}],
                        max_tokens=2, temperature=0)  # type: ignore[arg-type]
                    assert other.choices[0].message.content is not None
                    moved = True
        finally:
            await h.put("/admin/policy", headers=AUTH, json={
                "enabled_modes": None, "exploration_share": 0.03})
        metrics = (await h.get("/metrics")).text
    last = chunks[-1]
    assert last.model_extra == {"spec_mode": "eagle3", "spec_moves": 1}, \
        (last, gw.log.read_text()[-4000:])
    assert last.usage is not None
    assert last.usage.completion_tokens == reference.usage.completion_tokens  # type: ignore[union-attr]
    assert last.usage.prompt_tokens == reference.usage.prompt_tokens  # type: ignore[union-attr]
    assert text == reference.choices[0].message.content
    assert 'specgate_moves_total{source="standard",target="eagle3"}' in metrics

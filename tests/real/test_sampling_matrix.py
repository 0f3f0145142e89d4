"""Every sampling field vLLM's server accepts, on every mode, through real engines.

Each field alone and in the combinations clients send, greedy and sampled,
streamed and not, forced on each mode and under auto: the answer is a 200 with
text, or a 400 naming the field that the mode's declared capabilities refuse
(``engines/capabilities.py``); never a 5xx, and no engine dies on the way.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import openai
import pytest

from engines.capabilities import for_method
from tests.real.conftest import RealGateway

MODES = ("standard", "ngram", "eagle3", "dflash", "auto")
SPECULATIVE = ("ngram", "eagle3", "dflash")
# Token 28 is "=" in SmolLM2's vocabulary; any id inside it would do.
ALONE: dict[str, dict[str, Any]] = {
    "top_k": {"top_k": 5},
    "top_p": {"top_p": 0.9},
    "min_p": {"min_p": 0.1},
    "seed": {"seed": 7},
    "n": {"n": 2},
    "logprobs": {"logprobs": True, "top_logprobs": 2},
    "stop": {"stop": ["."]},
    "min_tokens": {"min_tokens": 4},
    "logit_bias": {"logit_bias": {"28": 5}},
    "ignore_eos": {"ignore_eos": True},
    "presence_penalty": {"presence_penalty": 0.5},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "repetition_penalty": {"repetition_penalty": 1.2},
    "stop_token_ids": {"stop_token_ids": [2]},
    "allowed_token_ids": {"allowed_token_ids": list(range(28, 300))},
    "bad_words": {"bad_words": ["the"]},
    "include_stop_str_in_output": {"stop": [" "], "include_stop_str_in_output": True},
}
COMBOS: dict[str, dict[str, Any]] = {
    "top_k+top_p+min_p": {"top_k": 40, "top_p": 0.9, "min_p": 0.05},
    "top_k+top_p+seed+n": {"top_k": 20, "top_p": 0.95, "seed": 1, "n": 2},
    "penalties+top_k": {"presence_penalty": 0.3, "frequency_penalty": 0.3,
                        "repetition_penalty": 1.1, "top_k": 10},
    "logprobs+top_k+seed": {"logprobs": True, "top_logprobs": 3, "top_k": 5, "seed": 3},
    "stop+min_tokens+ignore_eos+top_k": {"stop": ["\n"], "min_tokens": 2, "ignore_eos": True,
                                         "top_k": 8},
    "logit_bias+top_k": {"logit_bias": {"28": 2}, "top_k": 4},
}
CASES = {**ALONE, **COMBOS}


def refused_field(mode: str, body: dict[str, Any], temperature: float) -> str | None:
    """The field refused on ``mode`` (None: it serves it): greedy decoding has one
    answer (n > 1 is vLLM's 400), and the declared capabilities."""
    if body.get("n", 1) > 1 and temperature == 0:
        return "n"
    if mode not in SPECULATIVE:
        return None
    sampled_only = {"top_k", "top_p", "min_p"}   # greedy decoding ignores them
    asked = frozenset(f for f, v in body.items()
                      if v and (temperature > 0 or f not in sampled_only))
    refusal = for_method(mode, cpu=True).refusal(asked)
    return refusal[0] if refusal else None


async def one(c: openai.AsyncOpenAI, model: str, mode: str, case: str, temperature: float,
              stream: bool) -> str | None:
    """None when the answer is right for the mode's capabilities; else what was wrong."""
    body = CASES[case]
    extra = {k: v for k, v in body.items()
             if k not in ("n", "seed", "stop", "logprobs", "top_logprobs", "top_p",
                          "presence_penalty", "frequency_penalty", "logit_bias")}
    std = {k: v for k, v in body.items() if k not in extra}
    where = f"{mode}/{case}/t={temperature}/{'stream' if stream else 'json'}"
    expected = refused_field(mode, body, temperature)
    try:
        kwargs: dict[str, Any] = dict(
            model=model, temperature=temperature, max_tokens=6, extra_body=extra,
            extra_headers={"x-spec-mode": mode},
            messages=[{"role": "user", "content": "Write one line about the sea."}], **std)
        if stream:
            chunks = await c.chat.completions.create(stream=True, **kwargs)
            texts: dict[int, str] = {}
            finished: set[int] = set()
            async for chunk in chunks:
                for ch in chunk.choices:
                    texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
                    if ch.finish_reason:
                        finished.add(ch.index)
            n = body.get("n", 1)
            if finished != set(range(n)):
                return f"{where}: stream finished choices {sorted(finished)}, wanted {n}"
        else:
            reply = await c.chat.completions.create(**kwargs)
            if len(reply.choices) != body.get("n", 1):
                return f"{where}: {len(reply.choices)} choices"
            if reply.usage is None or reply.usage.completion_tokens == 0:
                return f"{where}: no completion tokens"
    except openai.BadRequestError as e:
        err = (e.body or {}) if isinstance(e.body, dict) else {}
        if expected is None:
            return f"{where}: 400 {err}"
        if err.get("param") != expected or (
                expected != "n" and err.get("code") != "unsupported_parameter"):
            return f"{where}: 400 naming {err.get('param')!r}, wanted {expected!r}"
        return None
    except openai.APIError as e:
        return f"{where}: {type(e).__name__} {e}"
    if expected is not None:
        return f"{where}: served, but {expected!r} is declared refused there"
    return None


async def restarts(url: str) -> float:
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(url + "/metrics")).text
    return sum(float(m.group(1)) for m in re.finditer(
        r'^specgate_engine_restarts_total\{[^}]*\} ([0-9.e+]+)$', text, re.M))


async def test_every_field_on_every_mode_is_served_or_refused_by_name(
        real_gateway: RealGateway) -> None:
    before = await restarts(real_gateway.url)
    c = openai.AsyncOpenAI(base_url=real_gateway.url + "/v1", api_key="unused",
                           max_retries=0, timeout=600)
    # Streamed and not alternate across cases and modes, so each (case, mode, temperature)
    # runs once and every mode still sees both framings of every kind of field.
    jobs = [(mode, case, t, (i + j + k) % 2 == 1) for i, case in enumerate(CASES)
            for j, mode in enumerate(MODES) for k, t in enumerate((0.0, 0.8))]
    gate = asyncio.Semaphore(8)     # mixed batches: what broke engines came in company

    async def run(job: tuple[str, str, float, bool]) -> str | None:
        async with gate:
            return await one(c, real_gateway.model, *job)

    problems = [p for p in await asyncio.gather(*(run(j) for j in jobs)) if p]
    await c.close()
    assert not problems, "\n".join(problems[:40])
    assert await restarts(real_gateway.url) == before
    async with httpx.AsyncClient(timeout=30) as http:
        ready = await http.get(real_gateway.url + "/ready")
    assert ready.status_code == 200, ready.text


async def test_top_k_sampling_is_served_by_auto_and_refused_by_name_where_it_cannot_be(
        real_gateway: RealGateway) -> None:
    """top_k with the default temperature: the request that stopped every speculative
    engine of vLLM's CPU build. Auto serves it where it can; forced elsewhere, a 400."""
    c = openai.AsyncOpenAI(base_url=real_gateway.url + "/v1", api_key="unused",
                           max_retries=0, timeout=600)
    ask = dict(model=real_gateway.model, max_tokens=16, extra_body={"top_k": 5},
               messages=[{"role": "user", "content": "Say something."}])
    raw = await c.chat.completions.with_raw_response.create(**ask)  # type: ignore[arg-type]
    assert raw.headers["x-spec-mode"] == "standard"
    assert raw.headers["x-spec-decision"].endswith(" needs:top_k")
    assert raw.parse().choices[0].message.content
    for mode in SPECULATIVE:
        with pytest.raises(openai.BadRequestError) as e:
            await c.chat.completions.create(extra_headers={"x-spec-mode": mode},
                                            **ask)  # type: ignore[arg-type]
        assert isinstance(e.value.body, dict) and e.value.body["param"] == "top_k"
        assert "modes that can: auto, standard" in e.value.body["message"]
        assert real_gateway.engine_stats(mode)["up"] is True
    await c.close()

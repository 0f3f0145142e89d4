"""A mode served by an existing vLLM OpenAI-compatible server, reached over HTTP.

This is how SpecGate runs past one machine: gateway replicas in front of vLLM
servers that already exist (scheduled by Kubernetes, say). Requests go to the
server's ``/v1/completions`` with the gateway's own token ids (the gateway
renders chat templates itself, so every mode sees the same prompt), streamed
back with ``return_token_ids``. Load and acceptance come from the server's
``/metrics``, polled in the background; per-request acceptance rides on the
final usage chunk when the server runs with ``--per-request-spec-decode-metrics``.
Closing the stream (client gone) closes the HTTP response, and vLLM aborts a
request whose client disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from httpx_sse import EventSource

from engines.base import Engine, EngineUnavailable, InvalidGenerationRequest
from engines.capabilities import Capabilities, for_method
from engines.events import (
    Failed,
    Finished,
    GenerationEvent,
    SpecDecodeSummary,
    TextDelta,
    TokenLogprob,
    TopLogprob,
)
from engines.remote_metrics import RemoteMetrics
from engines.request import GenerationRequest, StructuredOutput
from engines.stats import EngineStats

log = logging.getLogger(__name__)


class RemoteVllmEngine(Engine):
    def __init__(self, mode: str, url: str, client: httpx.AsyncClient, *,
                 model: str | None = None, speculative: bool = False,
                 poll_interval_s: float = 1.0, start_timeout_s: float = 600.0) -> None:
        super().__init__(mode)
        self.url = url.rstrip("/")
        self.client = client
        self.model = model
        self.speculative = speculative
        # A remote vLLM server refuses what an in-process one of its method would.
        self._capabilities = for_method("remote" if speculative else None)
        self.poll_interval_s = poll_interval_s
        self.start_timeout_s = start_timeout_s
        self.metrics = RemoteMetrics()
        self._active: dict[str, httpx.Response] = {}
        self._poller: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def is_up(self) -> bool:
        stale = time.monotonic() - self.metrics.polled_at > max(5.0, 5 * self.poll_interval_s)
        return self._started and not self._closed and self.metrics.reachable and not stale

    async def start(self) -> None:
        if self._started:
            return
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                health = await self.client.get(f"{self.url}/health", timeout=5)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"{self.url} did not become healthy")
            await asyncio.sleep(1.0)
        if self.model is None:
            models = (await self.client.get(f"{self.url}/v1/models", timeout=10)).json()
            self.model = str(models["data"][0]["id"])
        await self._poll_once()
        self._started = True
        self._poller = asyncio.create_task(self._poll_forever())
        log.info("engine %r: remote vLLM server %s (model %s)", self.mode, self.url, self.model)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            await self._poll_once()

    async def _poll_once(self) -> None:
        try:
            r = await self.client.get(f"{self.url}/metrics", timeout=5)
            r.raise_for_status()
            self.metrics.update(r.text, time.monotonic())
        except (httpx.HTTPError, ValueError) as e:
            if self.metrics.reachable:
                log.warning("engine %r: %s/metrics unreachable: %s", self.mode, self.url, e)
            self.metrics.reachable = False

    def stats(self) -> EngineStats:
        m = self.metrics
        rate, length = m.window.snapshot(time.monotonic())
        return EngineStats(mode=self.mode, up=self.is_up, in_flight=len(self._active),
                           running=int(m.running), waiting=int(m.waiting),
                           kv_cache_usage=m.kv_cache_usage,
                           spec=m.spec_counters() if self.speculative else None,
                           recent_acceptance_rate=rate, recent_mean_accepted_length=length,
                           step_profile=m.steps.snapshot())

    async def abort(self, request_id: str) -> None:
        response = self._active.pop(request_id, None)
        if response is not None:
            await response.aclose()

    async def shutdown(self) -> None:
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for request_id in list(self._active):
            await self.abort(request_id)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        if not self.is_up:
            raise EngineUnavailable(f"engine for mode {self.mode!r} is not up")
        body = self._body(request)
        try:
            async with self.client.stream("POST", f"{self.url}/v1/completions", json=body,
                                          timeout=httpx.Timeout(10.0, read=None)) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode(errors="replace")
                    if 400 <= response.status_code < 500:
                        raise InvalidGenerationRequest(_error_message(text))
                    raise EngineUnavailable(f"{self.url} answered {response.status_code}")
                self._active[request.request_id] = response
                async for event in self._events(response, len(request.prompt_token_ids)):
                    yield event
        except (httpx.TransportError, httpx.StreamError) as e:
            if request.request_id not in self._active and not self._closed:
                raise EngineUnavailable(f"{self.url} unreachable: {e}") from e
            yield Failed(f"the {self.mode!r} engine's server dropped the request",
                         retryable=True)
        finally:
            self._active.pop(request.request_id, None)

    async def _events(self, response: httpx.Response,
                      prompt_tokens: int) -> AsyncIterator[GenerationEvent]:
        completion_tokens = 0
        spec: SpecDecodeSummary | None = None
        async for sse in EventSource(response).aiter_sse():
            data = sse.data
            if not data:  # a comment or a keep-alive
                continue
            if data == "[DONE]":
                yield Finished(prompt_tokens, completion_tokens, spec)
                return
            chunk = json.loads(data)
            if "error" in chunk:
                yield Failed(f"the {self.mode!r} engine failed: "
                             f"{_error_message(json.dumps(chunk))}", retryable=True)
                return
            for choice in chunk.get("choices", []):
                ids = tuple(choice.get("token_ids") or ())
                yield TextDelta(index=choice["index"], text=choice.get("text", ""),
                                token_ids=ids, logprobs=_logprobs(choice.get("logprobs")),
                                finish_reason=choice.get("finish_reason"))
            if chunk.get("usage"):
                completion_tokens = chunk["usage"]["completion_tokens"]
                spec = _spec(chunk.get("metrics"))
        yield Failed(f"the {self.mode!r} engine's stream ended early", retryable=True)

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        o = request.sampling
        body: dict[str, Any] = {
            "model": self.model, "prompt": list(request.prompt_token_ids),
            "max_tokens": o.max_tokens, "temperature": o.temperature, "top_p": o.top_p,
            "n": o.n, "presence_penalty": o.presence_penalty,
            "frequency_penalty": o.frequency_penalty, "stream": True,
            "stream_options": {"include_usage": True}, "return_token_ids": True,
            "request_id": request.request_id}
        if o.seed is not None:
            body["seed"] = o.seed
        if o.stop:
            body["stop"] = list(o.stop)
        if o.logprobs is not None:
            body["logprobs"] = o.logprobs
        # vLLM's extras, sent only when they differ from its defaults.
        extras: dict[str, Any] = {
            "top_k": o.top_k or None, "min_p": o.min_p or None,
            "repetition_penalty": None if o.repetition_penalty == 1.0 else o.repetition_penalty,
            "min_tokens": o.min_tokens or None, "ignore_eos": o.ignore_eos or None,
            "logit_bias": {str(t): b for t, b in o.logit_bias} or None,
            "stop_token_ids": list(o.stop_token_ids) or None,
            "include_stop_str_in_output": o.include_stop_str_in_output or None,
            "skip_special_tokens": None if o.skip_special_tokens else False,
            "spaces_between_special_tokens": None if o.spaces_between_special_tokens
            else False,
            "allowed_token_ids": list(o.allowed_token_ids) if o.allowed_token_ids else None,
            "bad_words": list(o.bad_words) or None, "cache_salt": request.cache_salt}
        body.update({k: v for k, v in extras.items() if v is not None})
        if o.structured is not None:
            body["structured_outputs"] = structured_body(o.structured)
        return body


def structured_body(c: StructuredOutput) -> dict[str, Any]:
    """vLLM's ``structured_outputs`` request field for a constraint."""
    value: Any = True if c.kind == "json_object" else \
        json.loads(c.spec) if c.kind in ("json", "choice") else c.spec
    out: dict[str, Any] = {c.kind: value}
    if c.disable_any_whitespace:
        out["disable_any_whitespace"] = True
    if c.disable_additional_properties:
        out["disable_additional_properties"] = True
    if c.whitespace_pattern is not None:
        out["whitespace_pattern"] = c.whitespace_pattern
    return out


def _error_message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text[:500]


def _spec(metrics: Any) -> SpecDecodeSummary | None:
    sd = (metrics or {}).get("speculative_decoding") if isinstance(metrics, dict) else None
    if not sd:
        return None
    return SpecDecodeSummary(num_drafts=int(sd.get("num_spec_steps", 0)),
                             num_draft_tokens=int(sd.get("num_draft_tokens", 0)),
                             num_accepted_tokens=int(sd.get("num_accepted_draft_tokens", 0)))


def _logprobs(lp: Any) -> tuple[TokenLogprob, ...] | None:
    if not lp or not lp.get("tokens"):
        return None
    result = []
    for token, logprob, top in zip(lp["tokens"], lp.get("token_logprobs") or [],
                                   lp.get("top_logprobs") or [], strict=False):
        tops = tuple(TopLogprob(t, max(float(v), -9999.0), tuple(t.encode()))
                     for t, v in (top or {}).items())
        result.append(TokenLogprob(token, max(float(logprob), -9999.0),
                                   tuple(token.encode()), tops))
    return tuple(result)

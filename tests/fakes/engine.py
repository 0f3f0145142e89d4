"""A real implementation of the engine contract, for fast tests only.

It keeps state like an engine does (started or not, running requests,
aborted ids, spec-decode counters) and raises where an engine would, so tests
exercise the gateway's real code paths without a model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

from engines.base import Engine, EngineUnavailable, InvalidGenerationRequest
from engines.capabilities import Capabilities, for_method, needs
from engines.events import (
    Failed,
    Finished,
    GenerationEvent,
    SpecDecodeSummary,
    TextDelta,
    TokenLogprob,
    TopLogprob,
)
from engines.request import GenerationRequest
from engines.stats import EngineStats, SpecDecodeCounters
from engines.tokenizer import ChatTemplateOptions, ChatTurn

WORDS = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")


class FakeTokenizer:
    """One token per character; chat turns rendered as ``<role>content\\n``."""

    vocab_size = 0x110000

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        # Like SmolLM2's tokenizer, it has no special tokens to add.
        return [ord(c) for c in text]

    def render_chat(self, turns: Sequence[ChatTurn],
                    options: ChatTemplateOptions | None = None) -> list[int]:
        options = options or ChatTemplateOptions()
        # Tools and tool turns as a Hermes-style template writes them.
        text = "".join(f"<tools>{json.dumps(t)}</tools>\n" for t in options.tools or ())
        text += "".join(self._turn(t) for t in turns)
        if options.continue_final_message:
            text = text.removesuffix("\n")
        elif options.add_generation_prompt:
            text += "<assistant>"
        return self.encode(text, options.add_special_tokens)

    @staticmethod
    def _turn(t: ChatTurn) -> str:
        message = t.template_message()
        calls = "".join(f"<tool_call>{json.dumps(c['function'])}</tool_call>"
                        for c in message.get("tool_calls", ()))
        role = f"{t.role}:{t.tool_call_id}" if t.tool_call_id else t.role
        return f"<{role}>{t.content}{calls}\n"

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in token_ids)


class FakeEngine(Engine):
    """Emits words from ``WORDS`` (one token each) until ``max_tokens`` or a stop string;
    told a ``reply``, it emits that text instead (a few characters a token), ending
    ``stop`` when it is all out, as a model's end-of-sequence would."""

    def __init__(self, mode: str, *, speculative: bool = False, acceptance: float = 0.5,
                 token_delay_s: float = 0.0, fail_after_tokens: int | None = None,
                 restartable: bool = False) -> None:
        super().__init__(mode)
        self._restartable = restartable
        self.starts = 0
        # Starts that fail (an engine that cannot come back), counted down.
        self.failing_starts = 0
        self.speculative = speculative
        self.acceptance = acceptance
        self.token_delay_s = token_delay_s
        self.fail_after_tokens = fail_after_tokens
        self.started = False
        self.running: set[str] = set()
        self.aborted: list[str] = []
        self.served: list[GenerationRequest] = []
        self._spec = SpecDecodeCounters()
        self._batches: set[int] = set()     # batch sizes it has decoded at (its profile)
        # A request that asks for all of these fields kills the engine (as one top_k
        # request killed vLLM 0.32's CPU speculative engines).
        self.killed_by: frozenset[str] | None = None
        self.reply: str | None = None

    @property
    def capabilities(self) -> Capabilities:
        return for_method("fake" if self.speculative else None)

    @property
    def is_up(self) -> bool:
        return self.started

    @property
    def restartable(self) -> bool:
        return self._restartable

    async def start(self) -> None:
        self.starts += 1
        if self.failing_starts:
            self.failing_starts -= 1
            raise RuntimeError(f"engine {self.mode!r} failed to start")
        self.started = True

    def die(self) -> None:
        """What a killed engine-core process looks like from the gateway: down for good,
        and every request it holds fails at its next token (``Failed``, engine died)."""
        self.started = False

    async def shutdown(self) -> None:
        self.started = False

    async def abort(self, request_id: str) -> None:
        self.running.discard(request_id)

    def stats(self) -> EngineStats:
        rate, s = self._spec.acceptance_rate, self._spec
        length = 1 + s.num_accepted_tokens / s.num_drafts if s.num_drafts else None
        return EngineStats(mode=self.mode, up=self.started, in_flight=len(self.running),
                           running=len(self.running),
                           spec=self._spec if self.speculative else None,
                           recent_acceptance_rate=rate if self.speculative else None,
                           recent_mean_accepted_length=length if self.speculative else None,
                           step_profile=tuple((b, 0.01, 1) for b in sorted(self._batches)))

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        if not self.started:
            raise EngineUnavailable(f"engine for mode {self.mode!r} is not up")
        if request.sampling.temperature > 2:
            raise InvalidGenerationRequest("temperature must be at most 2")
        self.served.append(request)
        if self.killed_by is not None and self.killed_by <= needs(request.sampling):
            self.die()
            yield Failed(f"the {self.mode!r} engine failed", retryable=True, engine_died=True)
            return
        self.running.add(request.request_id)
        completion = 0
        done = False
        try:
            for index in range(request.sampling.n):
                async for delta in self._choice(request, index):
                    if not self.started:
                        done = True
                        yield Failed(f"the {self.mode!r} engine failed", retryable=True,
                                     engine_died=True)
                        return
                    if self.fail_after_tokens is not None and completion >= self.fail_after_tokens:
                        done = True
                        yield Failed(f"the {self.mode!r} engine failed", retryable=True)
                        return
                    completion += len(delta.token_ids)
                    self._batches.add(len(self.running))
                    yield delta
            done = True
            yield Finished(len(request.prompt_token_ids), completion, self._observe(completion))
        finally:
            self.running.discard(request.request_id)
            if not done:  # the consumer went away mid-stream: an engine would abort
                self.aborted.append(request.request_id)

    async def _choice(self, request: GenerationRequest, index: int) -> AsyncIterator[TextDelta]:
        if self.reply is not None:
            async for delta in self._reply(request, index, self.reply):
                yield delta
            return
        o = request.sampling
        text = ""
        # A prompt that ends in this engine's own output (a moved request's continuation)
        # goes on where that output stopped, as a greedy model would.
        ids, offset = request.prompt_token_ids, 0
        while offset < len(ids) and ids[-1 - offset] >= 1000:
            offset += 1
        for i in range(offset, offset + o.max_tokens):
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            word = WORDS[(i + index) % len(WORDS)]
            text += word
            stop = next((s for s in o.stop if s in text), None)
            if stop is not None:
                yield TextDelta(index, "", (), None, "stop")
                return
            last = i == offset + o.max_tokens - 1
            logprobs = None
            if o.logprobs is not None:
                top = tuple(TopLogprob(w, -0.1 * (r + 1), tuple(w.encode()))
                            for r, w in enumerate(WORDS[:o.logprobs]))
                logprobs = (TokenLogprob(word, -0.1, tuple(word.encode()), top),)
            yield TextDelta(index, word, (1000 + i,), logprobs, "length" if last else None)

    async def _reply(self, request: GenerationRequest, index: int,
                     reply: str) -> AsyncIterator[TextDelta]:
        pieces = [reply[i:i + 3] for i in range(0, len(reply), 3)]
        o = request.sampling
        for i, piece in enumerate(pieces[:o.max_tokens]):
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            end = "stop" if i == len(pieces) - 1 else "length" if i == o.max_tokens - 1 \
                else None
            yield TextDelta(index, piece, (1000 + i,), None, end)

    def _observe(self, tokens: int) -> SpecDecodeSummary | None:
        if not self.speculative or tokens == 0:
            return None
        drafted = tokens * 3
        accepted = int(drafted * self.acceptance)
        s = self._spec
        self._spec = SpecDecodeCounters(s.num_drafts + tokens, s.num_draft_tokens + drafted,
                                        s.num_accepted_tokens + accepted)
        return SpecDecodeSummary(tokens, drafted, accepted)

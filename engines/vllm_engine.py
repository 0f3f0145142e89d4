"""An in-process vLLM ``AsyncLLM`` serving one decoding method.

vLLM is imported lazily inside methods so that the package imports (and the
fast test tier runs) without vLLM installed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import aclosing, contextmanager
from typing import Any

from engines.base import Engine, EngineUnavailable, InvalidGenerationRequest
from engines.capabilities import Capabilities, for_method
from engines.engine_spec import EngineSpec
from engines.events import Failed, Finished, GenerationEvent, TextDelta
from engines.request import GenerationRequest, SamplingOptions, StructuredOutput
from engines.stat_logger import LiveCounters, make_stat_logger_factory
from engines.stats import AcceptanceWindow, EngineStats, PrefillCost, StepTimeProfile
from engines.vllm_outputs import logprobs_from_vllm, spec_summary_from_vllm

log = logging.getLogger(__name__)

# While an abandoned start's constructor runs on, how often its new processes are ended.
ABANDON_POLL_S = 0.5
# The warm-up's prompt (token ids every vocabulary has) and its answer's length: as
# many steps for every method. Prompt lookup's is a cycle, which it drafts on at
# every step (``_warm_up_request``).
WARM_UP_PROMPT = tuple(range(1000, 1032))
WARM_UP_CYCLE = tuple(range(1000, 1008)) * 4
WARM_UP_TOKENS = 16
WARM_UP_BATCH = 8
WARM_UP_SETTLE_S = 0.1
WARM_UP_ID = "specgate-warm-up-"    # its requests' ids: served before the engine is up


class VllmEngine(Engine):
    def __init__(self, spec: EngineSpec) -> None:
        super().__init__(spec.mode)
        self.spec = spec
        self._llm: Any = None
        # Set by whoever builds the engines of a device group (``share_device``).
        self.peers_busy: Callable[[], bool] | None = None
        self._counters = LiveCounters(speculative=spec.is_speculative)
        self._in_flight = 0
        self._closed = False
        self._warming = False        # its warm-up runs: started, not yet up
        self.startup_seconds: float | None = None
        self._abandoned: asyncio.Task[None] | None = None
        self._method: str | None = (spec.speculative_config or {}).get("method")
        self._capabilities = for_method(self._method)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def in_flight(self) -> int:
        """Requests submitted here and not yet finished."""
        return self._in_flight

    @property
    def is_up(self) -> bool:
        return self._running() and not self._warming

    def _running(self) -> bool:
        return self._llm is not None and not self._closed and not self._llm.errored

    @property
    def restartable(self) -> bool:
        return True

    async def start(self) -> None:
        if self._llm is not None:
            return
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        s = self.spec
        args = AsyncEngineArgs(
            model=s.model,
            tokenizer=s.model,
            dtype=s.dtype,
            max_model_len=s.max_model_len,
            enforce_eager=s.enforce_eager,
            kv_cache_memory_bytes=s.kv_cache_bytes,
            speculative_config=s.speculative_config,
            per_request_spec_decode_metrics="summary" if s.is_speculative else "none",
            seed=s.seed,
            disable_log_stats=True,
            # Per-step elapsed time and batch: the step-time profile the policy uses.
            enable_logging_iteration_details=True,
            **s.extra_engine_args,
        )
        method = (s.speculative_config or {}).get("method", "plain decoding")
        log.info("engine %r: %s, KV cache %.2f GiB, max_model_len %d, dtype %s, cores %s",
                 self.mode, method, s.kv_cache_bytes / 1024**3, s.max_model_len, s.dtype,
                 s.cpu_threads_bind or "auto")
        began = time.monotonic()
        # Fresh counters on every start: a restarted engine's load is not the dead one's.
        self._counters = LiveCounters(speculative=s.is_speculative,
                                      peers_busy=self.peers_busy)
        loggers = [make_stat_logger_factory(self._counters)]
        with _env("VLLM_CPU_OMP_THREADS_BIND", s.cpu_threads_bind):
            # The constructor blocks until the engine-core child process has
            # loaded the model (tens of seconds), so it runs in a thread to keep
            # /health answering. Off the loop, AsyncLLM defers its output tasks
            # to the first request, which then runs on the loop as it must.
            before = _child_pids()
            constructing = asyncio.ensure_future(asyncio.to_thread(
                AsyncLLM.from_engine_args, args, stat_loggers=loggers))
            try:
                self._llm = await asyncio.shield(constructing)
            except asyncio.CancelledError:
                # A start given up on (its bound passed, or shutdown). The thread
                # cannot be stopped; ending the engine-core process it waits on makes
                # the constructor fail, and whatever it still builds is released.
                self._abandoned = asyncio.create_task(self._abandon(constructing, before))
                raise
        self.startup_seconds = time.monotonic() - began
        self._warming, self._closed = True, False
        self._capabilities = for_method(self._method, cpu=cpu_build_installed())
        try:
            await self._warm_up()
        finally:
            self._warming = False

    async def _warm_up(self) -> None:
        """Short greedy requests before the engine is handed any: the first pays the
        one-off allocations of a fresh engine (a cold CPU engine's first request runs
        slowly); then one request alone and ``WARM_UP_BATCH`` at once time
        the decode step at both ends of a batch, so that routing prices this engine
        from its own measurements from the first request on instead of the prior's,
        whose growth with the batch is a GPU's (on the CPU each verified token costs,
        and a drafter's step grows far faster than plain decoding's). The acceptance on
        these tokens says nothing of any traffic and is dropped."""
        counters = self._counters
        for attempt, batch in enumerate((1, 1, WARM_UP_BATCH)):
            requests = [self._warm_up_request(f"{WARM_UP_ID}{attempt}-{i}")
                        for i in range(batch)]
            try:
                await asyncio.gather(*(self._drain(r) for r in requests))
            except (EngineUnavailable, InvalidGenerationRequest) as e:
                # Died while warming (the supervisor sees it), or refused: unwarmed.
                log.warning("engine %r: warm-up failed: %s", self.mode, e)
                return
            await asyncio.sleep(WARM_UP_SETTLE_S)     # its last step's stats land
            if attempt == 0:
                counters.steps, counters.prefill = StepTimeProfile(), PrefillCost()
        counters.window = AcceptanceWindow()

    def _warm_up_request(self, request_id: str) -> GenerationRequest:
        """One warm-up request. Prompt lookup drafts only where the text repeats: on
        the plain prompt its steps would be timed drafting nothing, as cheap as plain
        decoding's, and at a large batch the drafts of real traffic would be priced
        as nearly free. On a cycle, which the model continues, it drafts ``K`` tokens
        at every step: its profile starts at its full drafting cost, which traffic
        that drafts less then brings down (``StepTimeProfile``), and its answer is
        ``K + 1`` times as long, so that it takes as many steps as the others."""
        lookup = self._method == "ngram"
        k = int((self.spec.speculative_config or {}).get("num_speculative_tokens") or 0)
        tokens = WARM_UP_TOKENS * (1 + k) if lookup else WARM_UP_TOKENS
        return GenerationRequest(request_id, WARM_UP_CYCLE if lookup else WARM_UP_PROMPT,
                                 SamplingOptions(max_tokens=tokens, min_tokens=tokens,
                                                 temperature=0.0))

    async def _drain(self, request: GenerationRequest) -> None:
        async for _ in self.generate(request):
            pass

    async def _abandon(self, constructing: asyncio.Future[Any], before: set[int]) -> None:
        while not constructing.done():
            _kill(_child_pids() - before, self.mode)
            await asyncio.wait([constructing], timeout=ABANDON_POLL_S)
        multiprocessing.active_children()  # reaps the ended processes
        if constructing.cancelled() or constructing.exception() is not None:
            return
        await asyncio.to_thread(constructing.result().shutdown)  # it started after all

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        from vllm.exceptions import VLLMClientError
        from vllm.inputs.engine import tokens_input
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        if not self._running() or (self._warming and
                                   not request.request_id.startswith(WARM_UP_ID)):
            raise EngineUnavailable(f"engine for mode {self.mode!r} is not up")
        params = self._sampling_params(request)
        completion_tokens = 0
        prompt_tokens = len(request.prompt_token_ids)
        spec_decode = None
        done = False
        self._in_flight += 1
        try:
            outputs = self._llm.generate(
                tokens_input(list(request.prompt_token_ids), cache_salt=request.cache_salt),
                params, request.request_id)
            async with aclosing(outputs):
                try:
                    async for out in outputs:
                        for c in out.outputs:
                            ids = tuple(c.token_ids)
                            completion_tokens += len(ids)
                            if c.spec_decode_metrics is not None:
                                spec_decode = spec_summary_from_vllm(c.spec_decode_metrics)
                            if ids or c.text or c.finish_reason:
                                yield TextDelta(
                                    index=c.index, text=c.text, token_ids=ids,
                                    logprobs=logprobs_from_vllm(
                                        ids, c.logprobs, request.sampling.logprobs or 0),
                                    finish_reason=c.finish_reason)
                except (EngineDeadError, EngineGenerateError) as e:
                    log.exception("engine %s failed request %s", self.mode, request.request_id)
                    done = True
                    yield Failed(f"the {self.mode!r} engine failed while serving the request",
                                 retryable=True, engine_died=isinstance(e, EngineDeadError))
                    return
                except (ValueError, VLLMClientError) as e:  # request validation
                    done = True
                    raise InvalidGenerationRequest(str(e)) from e
            done = True
            yield Finished(prompt_tokens, completion_tokens, spec_decode)
        finally:
            self._in_flight -= 1
            if not done and self._llm is not None and not self._llm.errored:
                await self._llm.abort(request.request_id)

    def _sampling_params(self, request: GenerationRequest) -> Any:
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        o = request.sampling
        try:
            return SamplingParams(
                n=o.n, temperature=o.temperature, top_p=o.top_p, seed=o.seed,
                stop=list(o.stop) or None, max_tokens=o.max_tokens,
                presence_penalty=o.presence_penalty,
                frequency_penalty=o.frequency_penalty, logprobs=o.logprobs,
                top_k=o.top_k, min_p=o.min_p, repetition_penalty=o.repetition_penalty,
                min_tokens=o.min_tokens, ignore_eos=o.ignore_eos,
                logit_bias=dict(o.logit_bias) or None,
                stop_token_ids=list(o.stop_token_ids) or None,
                include_stop_str_in_output=o.include_stop_str_in_output,
                skip_special_tokens=o.skip_special_tokens,
                spaces_between_special_tokens=o.spaces_between_special_tokens,
                allowed_token_ids=list(o.allowed_token_ids) if o.allowed_token_ids else None,
                bad_words=list(o.bad_words) or None,
                structured_outputs=_structured(o.structured),
                output_kind=RequestOutputKind.DELTA)
        except (ValueError, VLLMClientError) as e:
            raise InvalidGenerationRequest(str(e)) from e

    async def abort(self, request_id: str) -> None:
        if self._running():
            await self._llm.abort(request_id)

    def stats(self) -> EngineStats:
        c = self._counters
        rate, length = c.window.snapshot(time.monotonic())
        return EngineStats(
            mode=self.mode, up=self.is_up, in_flight=self._in_flight,
            running=c.running, waiting=c.waiting, kv_cache_usage=c.kv_cache_usage,
            spec=c.spec_counters() if self.spec.is_speculative else None,
            recent_acceptance_rate=rate, recent_mean_accepted_length=length,
            step_profile=c.steps.snapshot(), prefill_s=c.prefill.seconds,
            draft_token_s=c.steps.draft_token_s, step_drafted=c.steps.drafted)

    async def shutdown(self) -> None:
        if self._llm is None or self._closed:
            return
        self._closed = True
        llm, self._llm = self._llm, None
        # Stop reading outputs first, or the reader logs the engine's exit as a crash.
        handler = getattr(llm, "output_handler", None)
        if handler is not None:
            handler.cancel()
        await asyncio.to_thread(llm.shutdown)


def _structured(c: StructuredOutput | None) -> Any:
    if c is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    value: Any = True if c.kind == "json_object" else \
        json.loads(c.spec) if c.kind == "choice" else c.spec
    kind: dict[str, Any] = {c.kind: value}
    return StructuredOutputsParams(
        **kind, disable_any_whitespace=c.disable_any_whitespace,
        disable_additional_properties=c.disable_additional_properties,
        whitespace_pattern=c.whitespace_pattern)


def _child_pids() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _kill(pids: set[int], mode: str) -> None:
    import psutil

    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            continue
        log.warning("engine %r: start abandoned; killed its process %d", mode, pid)


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def cpu_build_installed() -> bool:
    """Whether the installed vLLM is its CPU build (no GPU platform)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def share_device(engines: Sequence[VllmEngine]) -> None:
    """Tell engines that take turns on one device (a device group) about each other,
    before they start: each times its steps only while the others hold no requests
    (``LiveCounters.peers_busy``)."""
    for engine in engines:
        peers = tuple(p for p in engines if p is not engine)
        engine.peers_busy = _any_busy(peers) if peers else None


def _any_busy(peers: tuple[VllmEngine, ...]) -> Callable[[], bool]:
    def busy() -> bool:
        return any(p.in_flight > 0 for p in peers)
    return busy

"""Soak: many concurrent clients against real vLLM CPU engines through the gateway.

For ``--duration`` seconds, ``--clients`` clients (the official ``openai``
SDK, over HTTP) send chat and completion requests, streaming and not, forced
to every mode or ``auto``, greedy, with prompts whose answers were recorded
once beforehand (plain decoding, alone), and about a third of the time requests
whose answer is checked for what it must be rather than for a text: sampled with
vLLM's extras (``top_k``, ``min_p``, penalties, a seed), JSON-schema output
(valid JSON matching the schema), a forced tool call (a call of the named function
with JSON arguments) and the Responses API (a finished response with text). Every
request must either come back
with exactly that text and the same usage (or the shape asked), or get a clear error (an OpenAI
envelope with a status, or an error event in the stream); anything else
(a transport error, a timeout, a stream that ends without finishing, a
different text or usage) counts as lost. The gateway's memory (its own
process, and with its engine processes) is sampled throughout.

With ``--chaos-every S`` (``make chaos``) it also kills a random engine's core
process (SIGKILL) every ``S`` seconds: requests in flight on it fail over to other
engines (``service/failover.py``), and the report counts kills, failovers and
restarts. What fails then by design (docs/api.md, "When an engine dies") is told
apart from requests that failed: a forced mode that is down is a 503; a field the
forced mode cannot serve, or a request kind held off the engine it was on when that
engine died, a 400; a request only plain decoding can serve (``top_k`` on vLLM's
CPU build) fails with plain decoding; and a stream that cannot resume ends with an
error event once it has sent output.

    .venv/bin/python -m bench.soak [--duration 600] [--clients 24] [--url URL]
        [--chaos-every 60]

Prints a markdown report (also written to ``--out``) and a last summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil

from bench.gateway_process import GatewayProcess

MODES = ("auto", "standard", "ngram", "eagle3", "dflash")
CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three uses of a paperclip.",
    "Repeat exactly: alpha beta gamma delta alpha beta gamma delta alpha beta gamma delta",
    "Explain in two sentences why the sky is blue.",
)
TEXT_PROMPTS = (
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Once upon a time, in a small village by the river,",
)
MAX_TOKENS = (8, 32, 96)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}]
EXTRA_KINDS = ("sampled", "json", "tools", "responses")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
EXTRA_SHARE = 0.3
# Request kinds that cannot resume at a seam (a seed, penalties, an output constraint):
# after a failover they start again, which a stream that sent output cannot.
RESTARTED = frozenset({"sampled", "json", "tools"})
# What the gateway process may grow by over a run: buffers and caches settle in
# the first minutes; steady growth beyond this would be a leak per request.
RSS_GROWTH_BOUND_MIB = 64


@dataclass(frozen=True)
class Case:
    endpoint: str            # "chat" or "completions"
    prompt: str
    max_tokens: int


@dataclass(frozen=True)
class Expected:
    text: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    tokens: int = 0
    examples: list[str] = field(default_factory=list)
    diverged_by_mode: Counter[str] = field(default_factory=Counter)
    diverged_examples: list[str] = field(default_factory=list)
    extra: Counter[str] = field(default_factory=Counter)   # checked-shape requests served
    # Errors the design gives (a forced mode down, a stream that cannot resume), by why;
    # any other error counts in ``outcomes["failed"]``.
    by_design: Counter[str] = field(default_factory=Counter)
    failed_examples: list[str] = field(default_factory=list)

    def diverged(self, mode: str, why: str) -> None:
        self.outcomes["diverged"] += 1
        self.diverged_by_mode[mode] += 1
        if len(self.diverged_examples) < 5:
            self.diverged_examples.append(why)

    def lost(self, why: str) -> None:
        self.outcomes["lost"] += 1
        if len(self.examples) < 10:
            self.examples.append(why)


def judge_error(tally: Tally, status: int | None, code: str, what: str, *, mode: str,
                stream: bool, kind: str | None, chaos: bool) -> None:
    """An error answer. Without chaos every clear error is just that; with it, the
    errors its design gives are told apart from requests that failed."""
    tally.errors[f"{status or 'stream'} {code}"] += 1
    if not chaos:
        tally.outcomes["clear_error"] += 1
        return
    if status == 400:
        # As without chaos: a field the forced mode cannot serve, or a request kind
        # held off an engine it was serving when that engine died.
        tally.by_design["a field the forced mode cannot serve now (400)"] += 1
    elif status == 503 and code == "mode_unavailable" and mode != "auto":
        tally.by_design["forced mode down (503)"] += 1
    elif kind == "sampled" and code == "engine_failed":
        # top_k: on vLLM's CPU build only plain decoding serves it.
        tally.by_design["only plain decoding can serve it, and it died"] += 1
    elif status is None and stream and kind in RESTARTED:
        tally.by_design["stream that cannot resume, after output (error event)"] += 1
    else:
        tally.outcomes["failed"] += 1
        if len(tally.failed_examples) < 10:
            tally.failed_examples.append(f"{what}: {status or 'stream'} {code}")
        return
    tally.outcomes["by_design"] += 1


def engine_cores(gateway_pid: int) -> list[int]:
    """The gateway's engine-core child processes."""
    return [p.pid for p in psutil.Process(gateway_pid).children(recursive=True)
            if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline())]


async def kill_engines(pid: int, every_s: float, kills: list[float], began: float) -> None:
    """SIGKILL a random engine core every ``every_s``."""
    rng = random.Random(0)
    while True:
        await asyncio.sleep(every_s)
        cores = engine_cores(pid)
        if cores:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(cores), signal.SIGKILL)
                kills.append(time.monotonic() - began)


def counter_totals(metrics: str, name: str) -> dict[str, float]:
    """``name``'s samples from a /metrics text, by label set."""
    out = {}
    for m in re.finditer(rf"^{name}\{{(.*)\}} (\S+)$", metrics, re.MULTILINE):
        if float(m.group(2)):
            out[m.group(1)] = float(m.group(2))
    return out


def cases() -> list[Case]:
    return ([Case("chat", p, m) for p in CHAT_PROMPTS for m in MAX_TOKENS]
            + [Case("completions", p, m) for p in TEXT_PROMPTS for m in MAX_TOKENS])


async def call(client: openai.AsyncOpenAI, model: str, case: Case, mode: str,
               stream: bool) -> tuple[str, int, int]:
    """(text, prompt tokens, completion tokens); raises what the SDK raises."""
    headers = {"x-spec-mode": mode}
    common = {"model": model, "max_tokens": case.max_tokens, "temperature": 0,
              "extra_headers": headers}
    if case.endpoint == "chat":
        messages = [{"role": "user", "content": case.prompt}]
        if not stream:
            r = await client.chat.completions.create(messages=messages, **common)  # type: ignore[call-overload]
            return r.choices[0].message.content or "", r.usage.prompt_tokens, \
                r.usage.completion_tokens
        s = await client.chat.completions.create(  # type: ignore[call-overload]
            messages=messages, stream=True, stream_options={"include_usage": True}, **common)
    else:
        if not stream:
            r = await client.completions.create(prompt=case.prompt, **common)  # type: ignore[call-overload]
            return r.choices[0].text, r.usage.prompt_tokens, r.usage.completion_tokens
        s = await client.completions.create(  # type: ignore[call-overload]
            prompt=case.prompt, stream=True, stream_options={"include_usage": True}, **common)
    text, usage, finished = "", None, False
    async for chunk in s:
        for c in chunk.choices:
            text += (c.delta.content or "") if case.endpoint == "chat" else c.text
            finished = finished or c.finish_reason is not None
        usage = chunk.usage or usage
    if usage is None or not finished:
        raise EOFError("the stream ended without a finish reason and usage")
    return text, usage.prompt_tokens, usage.completion_tokens


async def references(client: openai.AsyncOpenAI, model: str) -> dict[Case, Expected]:
    found = {}
    for case in cases():
        text, prompt, completion = await call(client, model, case, "standard", stream=False)
        found[case] = Expected(text, prompt, completion)
    return found


async def client_loop(i: int, client: openai.AsyncOpenAI, model: str,
                      expected: dict[Case, Expected], deadline: float, tally: Tally,
                      chaos: bool = False) -> None:
    rng = random.Random(i)
    all_cases = list(expected)
    while time.monotonic() < deadline:
        case, mode, stream = rng.choice(all_cases), rng.choice(MODES), rng.random() < 0.5
        extra = rng.choice(EXTRA_KINDS) if rng.random() < EXTRA_SHARE else None
        began = time.monotonic()
        try:
            if extra is not None:
                wrong = await call_extra(client, model, extra, mode, stream)
                if wrong is not None:
                    tally.lost(f"{extra} on {mode} stream={stream}: {wrong}")
                else:
                    tally.outcomes["ok"] += 1
                    tally.extra[extra] += 1
                continue
            got = await call(client, model, case, mode, stream)
        except openai.APIStatusError as e:
            body = e.body if isinstance(e.body, dict) else {}
            if "message" in body or "error" in body:
                judge_error(tally, e.status_code, str(body.get("code") or body.get("type")),
                            f"{extra or case.endpoint} on {mode} stream={stream}", mode=mode,
                            stream=stream, kind=extra, chaos=chaos)
            else:
                tally.lost(f"{e.status_code} without an error envelope: {e}")
            continue
        except openai.APIError as e:           # an error event inside a 200 stream
            if isinstance(e, openai.APIConnectionError):
                tally.lost(f"{mode} {case.endpoint}: {type(e).__name__}: {e}")
            else:
                judge_error(tally, None, str(e.code or type(e).__name__),
                            f"{extra or case.endpoint} on {mode} stream={stream}", mode=mode,
                            stream=stream, kind=extra, chaos=chaos)
            continue
        except Exception as e:
            tally.lost(f"{mode} {case.endpoint} stream={stream}: {type(e).__name__}: {e}")
            continue
        want = expected[case]
        if got != (want.text, want.prompt_tokens, want.completion_tokens):
            why = (f"{mode} {case.endpoint} stream={stream} max_tokens={case.max_tokens}: "
                   f"got {got!r}, expected {want!r}")
            text, prompt_tokens, completion_tokens = got
            if prompt_tokens == want.prompt_tokens and bool(text) == bool(want.text) \
                    and 0 < completion_tokens <= case.max_tokens:
                # A whole answer whose greedy text differs from plain decoding's: in bf16,
                # verifying several tokens in one pass (speculation) or in another batch
                # rounds differently, and a near-tie can flip. Shown, not counted as lost.
                tally.diverged(mode, why)
            else:
                tally.lost(why)
            continue
        tally.outcomes["ok"] += 1
        tally.latencies.append(time.monotonic() - began)
        tally.tokens += want.completion_tokens


async def call_extra(client: openai.AsyncOpenAI, model: str, kind: str, mode: str,
                     stream: bool) -> str | None:
    """A request checked for the shape of its answer: None when right, else why not."""
    common: dict[str, Any] = {"model": model, "max_tokens": 48,
                              "extra_headers": {"x-spec-mode": mode}}
    if kind == "responses":
        return await call_responses(client, model, mode, stream)
    if kind == "tools":
        common.update(temperature=0, tools=TOOLS, parallel_tool_calls=False, tool_choice={
            "type": "function", "function": {"name": "get_weather"}})
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = await client.chat.completions.create(messages=messages, **common)  # type: ignore[call-overload]
        calls = r.choices[0].message.tool_calls or []
        if len(calls) != 1 or calls[0].function.name != "get_weather":
            return f"no call of get_weather: {r.choices[0].message!r}"
        try:
            args = json.loads(calls[0].function.arguments)
        except ValueError:
            return f"arguments not JSON: {calls[0].function.arguments!r}"
        return None if isinstance(args, dict) and "city" in args else f"arguments {args!r}"
    if kind == "sampled":
        common.update(temperature=0.8, top_p=0.9, seed=7, presence_penalty=0.2,
                      extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
        messages = [{"role": "user", "content": "Write a line about the sea."}]
    else:
        common.update(temperature=0, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
        messages = [{"role": "user", "content": "Invent a person as JSON."}]
    if stream:
        s = await client.chat.completions.create(messages=messages, stream=True, **common)  # type: ignore[call-overload]
        text, finish = "", None
        async for chunk in s:
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
    else:
        r = await client.chat.completions.create(messages=messages, **common)  # type: ignore[call-overload]
        text, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
    if finish is None:
        return "no finish reason"
    if kind == "json":
        try:
            value = json.loads(text)
        except ValueError:
            return f"not JSON: {text!r}"
        if not (isinstance(value, dict) and set(value) == {"name", "age"}
                and isinstance(value["age"], int)):
            return f"does not match the schema: {text!r}"
    return None


async def call_responses(client: openai.AsyncOpenAI, model: str, mode: str,
                         stream: bool) -> str | None:
    ask: dict[str, Any] = {"model": model, "input": "Write a line about the sea.",
                           "max_output_tokens": 32, "temperature": 0,
                           "extra_headers": {"x-spec-mode": mode}}
    if stream:
        final = None
        async for event in await client.responses.create(stream=True, **ask):
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
        if final is None:
            return "the stream ended without response.completed or response.incomplete"
    else:
        final = await client.responses.create(**ask)
    if final.status not in ("completed", "incomplete") or not final.output_text:
        return f"response {final.status} with text {final.output_text!r}"
    return None


def rss_mib(pid: int) -> tuple[float, float]:
    """(the gateway process, the gateway with its engine processes) in MiB."""
    proc = psutil.Process(pid)
    own = proc.memory_info().rss
    total = own + sum(c.memory_info().rss for c in proc.children(recursive=True))
    return own / 2**20, total / 2**20


async def soak(url: str, pid: int | None, duration: float, clients: int,
               chaos_every: float = 0.0) -> str:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=600)
    model = (await client.models.list()).data[0].id
    expected = await references(client, model)
    # Warm every mode once, so that the first memory sample is not taken cold.
    await asyncio.gather(*(call(client, model, c, m, s) for c in list(expected)[:2]
                           for m in MODES for s in (False, True)))
    samples: list[tuple[float, float, float]] = []
    began = time.monotonic()
    tally = Tally()

    async def sample_memory() -> None:
        while True:
            if pid is not None:
                samples.append((time.monotonic() - began, *rss_mib(pid)))
            await asyncio.sleep(10)

    sampler = asyncio.create_task(sample_memory())
    kills: list[float] = []
    chaos = chaos_every > 0 and pid is not None
    killer = asyncio.create_task(kill_engines(pid, chaos_every, kills, began)) \
        if chaos and pid is not None else None
    deadline = began + duration
    await asyncio.gather(*(client_loop(i, client, model, expected, deadline, tally, chaos)
                           for i in range(clients)))
    elapsed = time.monotonic() - began
    sampler.cancel()
    if killer is not None:
        killer.cancel()
    if pid is not None:
        samples.append((elapsed, *rss_mib(pid)))
    await client.close()
    text = report(tally, samples, elapsed, clients, duration)
    if chaos:
        async with httpx.AsyncClient(timeout=30) as h:
            metrics = (await h.get(url + "/metrics")).text
        text = chaos_report(tally, kills, metrics, chaos_every) + "\n\n" + text
    return text


def chaos_report(tally: Tally, kills: list[float], metrics: str, every_s: float) -> str:
    failovers = counter_totals(metrics, "specgate_failovers_total")
    restarts = counter_totals(metrics, "specgate_engine_restarts_total")
    lines = [f"## Chaos: an engine's core process killed (SIGKILL) every {every_s:.0f} s", "",
             f"- kills: {len(kills)} (at " + ", ".join(f"{t:.0f}" for t in kills) + " s)",
             f"- requests failed over (specgate_failovers_total): "
             f"{sum(failovers.values()):.0f} ("
             + (", ".join(f"{k} {v:.0f}" for k, v in sorted(failovers.items())) or "none")
             + ")",
             "- engine restarts (specgate_engine_restarts_total): "
             + (", ".join(f"{k} {v:.0f}" for k, v in sorted(restarts.items())) or "none"),
             f"- errors by design: {tally.outcomes['by_design']} ("
             + (", ".join(f"{k} {v}" for k, v in tally.by_design.most_common()) or "none")
             + ")",
             f"- **failed otherwise: {tally.outcomes['failed']}**"]
    lines += [f"  - {e}" for e in tally.failed_examples]
    lines += ["", f"chaos_kills={len(kills)} failovers={sum(failovers.values()):.0f} "
                  f"failed={tally.outcomes['failed']} by_design={tally.outcomes['by_design']}"]
    return "\n".join(lines)


def report(tally: Tally, samples: list[tuple[float, float, float]], elapsed: float,
           clients: int, duration: float) -> str:
    total = sum(tally.outcomes.values())
    lat = sorted(tally.latencies)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    lines = [f"# Soak: {clients} clients for {duration:.0f} s", "",
             "| figure | value |", "|---|---|",
             f"| requests | {total} |",
             f"| completed with the expected text and usage (or shape) | "
             f"{tally.outcomes['ok']} (of which "
             + (", ".join(f"{k} {n}" for k, n in sorted(tally.extra.items())) or "none")
             + " checked for shape) |",
             f"| complete, greedy text differs from plain decoding's | "
             f"{tally.outcomes['diverged']} ("
             + (", ".join(f"{m} {n}" for m, n in sorted(tally.diverged_by_mode.items()))
                or "none") + ") |",
             f"| clear errors | {tally.outcomes['clear_error']} |",
             f"| **lost** | **{tally.outcomes['lost']}** |",
             f"| throughput | {total / elapsed:.2f} req/s, {tally.tokens / elapsed:.1f} "
             f"completion tokens/s |",
             f"| latency of completed requests | p50 {p50:.2f} s, p99 {p99:.2f} s |"]
    if samples:
        first, last = samples[0], samples[-1]
        peak = max(s[1] for s in samples)
        lines += [f"| gateway RSS (own process) | start {first[1]:.0f} MiB, end "
                  f"{last[1]:.0f} MiB, peak {peak:.0f} MiB, growth {last[1] - first[1]:+.0f} MiB |",
                  f"| with engine processes | start {first[2]:.0f} MiB, end {last[2]:.0f} MiB |"]
    lines += ["", "Errors by type:", ""]
    lines += [f"- {k}: {v}" for k, v in tally.errors.most_common()] or ["- none"]
    if tally.examples:
        lines += ["", "Lost (first examples):", ""] + [f"- {e}" for e in tally.examples]
    if tally.diverged_examples:
        lines += ["", "Differing greedy text (first examples):", ""] + \
            [f"- {e}" for e in tally.diverged_examples]
    growth = samples[-1][1] - samples[0][1] if samples else float("nan")
    verdict = "within" if growth <= RSS_GROWTH_BOUND_MIB else "OVER"
    lines += ["", f"Gateway memory growth {growth:+.0f} MiB: {verdict} the stated bound of "
                  f"{RSS_GROWTH_BOUND_MIB} MiB over the run (its own process: the engine "
                  "processes hold vLLM's caches and are bounded by their KV-cache setting)."]
    lines += ["", f"soak_requests={total} lost={tally.outcomes['lost']} "
                  f"diverged={tally.outcomes['diverged']} "
                  f"clear_errors={tally.outcomes['clear_error']} p50_s={p50:.2f} p99_s={p99:.2f} "
                  f"rss_growth_mib={growth:.0f}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--url", help="a running gateway (else one is started here)")
    parser.add_argument("--chaos-every", type=float, default=0.0,
                        help="kill a random engine's core process this often, in seconds "
                        "(a gateway started here only; 0: never)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/soak.md"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.url:
        text = asyncio.run(soak(args.url, None, args.duration, args.clients))
    else:
        with GatewayProcess(args.out.with_suffix(".gateway.log"),
                            {"SPECGATE_MAX_MODEL_LEN": "1024"}) as gateway:
            text = asyncio.run(soak(gateway.url, gateway.pid, args.duration, args.clients,
                                    args.chaos_every))
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

"""Drafter acceptance on the held-out prompts, through real vLLM engines.

For each method (plain decoding, EAGLE-3, DFlash) one vLLM CPU engine serves the
held-out prompts (training/data/heldout.jsonl, never used in training) one at a
time, greedy. Per method it reports the mean acceptance length (accepted drafts
per verification step + 1), the per-position acceptance (share of steps whose
k-th draft was accepted), completion tokens/s at c = 1 against plain decoding,
and whether every greedy output matched plain decoding's token for token.
Methods run one after another, each engine alone on the machine.

With ``--gateway`` it then starts ``specgate serve`` (the shipped drafters) and
sends the held-out prompts of each kind at c = 1 through HTTP with every mode
forced by ``x-spec-mode``, side by side (each prompt to every mode in turn, the
order rotating, so machine noise hits all modes alike), and reports completion
tokens/s per mode and kind.

    .venv/bin/python -m bench.acceptance [--eagle3 DIR] [--dflash DIR] [--max-tokens 128]
                                         [--gateway]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OUT = Path("bench/out/acceptance.json")
GATEWAY_MODES = ("standard", "ngram", "eagle3", "dflash")


@dataclass
class MethodResult:
    method: str
    k: int
    requests: int = 0
    tokens: int = 0
    seconds: float = 0.0
    drafts: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [drafts, accepted]
    mismatches: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def acceptance_length(self) -> float:
        return 1 + self.accepted / self.drafts if self.drafts else 1.0

    def per_position(self) -> list[float]:
        total = sum(self.histogram)
        return [sum(self.histogram[j:]) / total if total else 0.0
                for j in range(1, len(self.histogram))]


def run_method(model_dir: Path, method: str, drafter: Path | None, k: int,
               prompts: list[tuple[str, list[int]]], max_tokens: int,
               reference: dict[int, list[int]] | None,
               dtype: str = "float32",
               eager: bool = True) -> tuple[MethodResult, dict[int, list[int]]]:
    from vllm import SamplingParams

    from bench.offline_engine import draft_counts, histogram, offline_llm

    llm = offline_llm(model_dir, method, drafter, k, dtype, eager)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    result = MethodResult(method, k, histogram=[0] * (k + 1))
    outputs: dict[int, list[int]] = {}
    llm.generate([{"prompt_token_ids": prompts[0][1]}], params, use_tqdm=False)  # warm-up
    for i, (kind, ids) in enumerate(prompts):
        began = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
        result.seconds += time.perf_counter() - began
        result.requests += 1
        result.tokens += len(out.token_ids)
        outputs[i] = list(out.token_ids)
        if reference is not None and reference[i] != outputs[i]:
            result.mismatches += 1
        hist = histogram(out)
        if hist is not None:
            drafts, accepted = draft_counts(hist)
            result.drafts += drafts
            result.accepted += accepted
            for j, c in enumerate(hist[:k + 1]):
                result.histogram[j] += c
            seen = result.by_kind.setdefault(kind, [0, 0])
            seen[0] += drafts
            seen[1] += accepted
    del llm
    gc.collect()
    return result, outputs


def main(argv: list[str] | None = None) -> None:
    from engines.embedded import prepare_embedded
    from engines.tokenizer import ChatTurn, HfTokenizer
    from service.settings import Settings
    from training.prompts import heldout_prompts, prompts_from_file

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eagle3", type=Path, help="EAGLE-3 drafter dir (default: shipped)")
    parser.add_argument("--dflash", type=Path, help="DFlash drafter dir (default: shipped)")
    parser.add_argument("--eagle3-k", type=int, default=3)
    parser.add_argument("--dflash-k", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, help="first N held-out prompts per kind")
    parser.add_argument("--prompts", type=Path,
                        help="another prompt set (JSONL with text and kind), e.g. training "
                             "prompts to compare in- and out-of-distribution acceptance")
    parser.add_argument("--methods", default="eagle3,dflash",
                        help="speculative methods to measure (comma-separated)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--gateway", action="store_true",
                        help="also measure c = 1 tokens/s per forced mode through the gateway")
    parser.add_argument("--skip-engines", action="store_true",
                        help="only the gateway measurement")
    parser.add_argument("--rounds", type=int, default=2,
                        help="times each prompt goes to every mode through the gateway")
    parser.add_argument("--dtype", help="engine dtype (default: what the gateway serves, "
                                        "float32 for the embedded model)")
    parser.add_argument("--compile", action="store_true",
                        help="engines compiled (torch.compile), not eager: as served "
                             "with SPECGATE_ENFORCE_EAGER=false")
    args = parser.parse_args(argv)
    dtype = args.dtype or Settings().resolved_dtype()

    embedded = prepare_embedded(Settings().cache_dir)
    eagle3 = args.eagle3 or embedded.eagle3_dir
    dflash = args.dflash or embedded.dflash_dir
    tok = HfTokenizer(str(embedded.target_dir))
    held = prompts_from_file(args.prompts) if args.prompts else heldout_prompts()
    if args.limit:
        held = [p for kind in ("code", "copy", "chat")
                for p in [q for q in held if q.kind == kind][:args.limit]]
    prompts = [(p.kind, tok.render_chat([ChatTurn("user", p.text)])) for p in held]

    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not args.skip_engines:
        plain, reference = run_method(embedded.target_dir, "standard", None, 0, prompts,
                                      args.max_tokens, None, dtype, not args.compile)
        results = [plain]
        wanted = set(args.methods.split(","))
        for method, drafter, k in (("eagle3", eagle3, args.eagle3_k),
                                   ("dflash", dflash, args.dflash_k)):
            if method not in wanted:
                continue
            results.append(run_method(embedded.target_dir, method, drafter, k, prompts,
                                      args.max_tokens, reference, dtype, not args.compile)[0])
        report = render(results, len(prompts), args.max_tokens, dtype)
        print(report, flush=True)
        args.out.write_text(json.dumps([_row(r, plain) for r in results], indent=2) + "\n")
        args.out.with_suffix(".md").write_text(report + "\n")
    if args.gateway:
        speeds = asyncio.run(gateway_speeds(held, args.max_tokens, args.rounds))
        table = render_gateway(speeds)
        print(table)
        args.out.with_name("acceptance_gateway.json").write_text(json.dumps(speeds, indent=2))
        args.out.with_name("acceptance_gateway.md").write_text(table + "\n")


async def gateway_speeds(held: list[Any], max_tokens: int,
                         rounds: int) -> dict[str, dict[str, float]]:
    """Completion tokens/s per kind and forced mode, c = 1, through ``specgate serve``."""
    import tempfile

    import openai

    from bench.gateway_process import GatewayProcess

    tokens: dict[str, dict[str, int]] = {}
    seconds: dict[str, dict[str, float]] = {}
    log = Path(tempfile.mkdtemp()) / "specgate.log"
    with GatewayProcess(log, {"SPECGATE_MAX_MODEL_LEN": "1024"}) as gw:
        client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", timeout=600)
        model = (await client.models.list()).data[0].id
        turn = 0
        for _ in range(rounds):
            for kind in ("code", "copy", "chat"):
                for p in (q for q in held if q.kind == kind):
                    # Side by side: every mode serves this prompt in turn, the order
                    # rotating, so that a slow spell of the machine lands on all alike.
                    shift = turn % len(GATEWAY_MODES)
                    turn += 1
                    for mode in GATEWAY_MODES[shift:] + GATEWAY_MODES[:shift]:
                        began = time.perf_counter()
                        reply = await client.chat.completions.create(
                            model=model, temperature=0, max_tokens=max_tokens,
                            messages=[{"role": "user", "content": p.text}],
                            extra_headers={"x-spec-mode": mode, "x-workload-class": kind})
                        spent = time.perf_counter() - began
                        n = reply.usage.completion_tokens if reply.usage else 0
                        tokens.setdefault(kind, {}).setdefault(mode, 0)
                        tokens[kind][mode] += n
                        seconds.setdefault(kind, {}).setdefault(mode, 0.0)
                        seconds[kind][mode] += spent
        await client.close()
    return {kind: {mode: tokens[kind][mode] / seconds[kind][mode] for mode in GATEWAY_MODES}
            for kind in tokens}


def render_gateway(speeds: dict[str, dict[str, float]]) -> str:
    lines = ["Through the gateway, c = 1, each mode forced by x-spec-mode (completion "
             "tokens/s; in brackets: / standard)", "",
             "| kind | " + " | ".join(GATEWAY_MODES) + " |",
             "|---|" + "---|" * len(GATEWAY_MODES)]
    for kind, row in speeds.items():
        cells = [f"{row[m]:.1f} ({row[m] / row['standard']:.2f}x)" for m in GATEWAY_MODES]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _row(r: MethodResult, plain: MethodResult) -> dict[str, Any]:
    return {**asdict(r), "acceptance_length": r.acceptance_length,
            "per_position": r.per_position(), "tokens_per_s": r.tokens_per_s,
            "speedup_vs_plain": r.tokens_per_s / plain.tokens_per_s}


def render(results: list[MethodResult], n: int, max_tokens: int, dtype: str) -> str:
    plain = results[0]
    lines = [f"Held-out prompts: {n}, greedy, max_tokens {max_tokens}, {dtype}, c = 1, one "
             "engine at a time.", "",
             "| method | K | mean acceptance length | per-position acceptance | "
             "by kind (code / copy / chat) | tokens/s | vs plain | greedy output = plain |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        pos = " / ".join(f"{p:.2f}" for p in r.per_position()) or "–"
        kinds = " / ".join(
            f"{1 + r.by_kind[k][1] / r.by_kind[k][0]:.2f}" if r.by_kind.get(k, [0])[0] else "–"
            for k in ("code", "copy", "chat"))
        same = "–" if r is plain else f"{r.requests - r.mismatches}/{r.requests}"
        length = "–" if r is plain else f"{r.acceptance_length:.2f}"
        lines.append(f"| {r.method} | {r.k or '–'} | {length} | {pos} | "
                     f"{kinds if r is not plain else '–'} | {r.tokens_per_s:.1f} | "
                     f"{r.tokens_per_s / plain.tokens_per_s:.2f}x | {same} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

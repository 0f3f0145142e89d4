"""How well each mode's acceptance is predicted from the request alone, on traffic the
classifier was not written for.

The router predicts a request's acceptance length (τ) on each mode as what its
workload class has measured so far (``service/request_class.py``: classes from the
prompt's shape, no word lists). This script scores that prediction, and the keyword
classifier it replaced (``bench/keyword_classes.py``), on the same requests:

1. every distinct conversation of ``bench.peer``'s workloads (``mixed`` and ``light``,
   whose prompts carry the keywords; ``sharegpt`` and ``office``, which do not),
   rendered with the chat template as the gateway renders them;
2. real vLLM CPU engines measure each request's τ: plain decoding writes the greedy
   answers, EAGLE-3 and DFlash serve every request with per-request draft counts,
   and prompt lookup (n-gram) is replayed on the answers (``engines/prompt_lookup.py``,
   exact);
3. online, in the workloads' order as ``bench.peer`` sends them: each request is
   predicted from the requests before it only (its class's pooled acceptance, else
   its family's, else every earlier request's), then learned. A classifier that
   predicts well has a small mean absolute error (MAE) per mode.

    .venv/bin/python -m bench.predictor_eval [--workloads mixed,light,sharegpt,office]
                                             [--labels bench/out/predictor_labels.json]

The engines' measurements are kept (``--labels``): run again, it scores the
classifiers on them without the engines, unless ``--measure`` asks for new ones.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.request_class import Asked

OUT = Path("bench/out/predictor_eval.json")
LABELS = Path("bench/out/predictor_labels.json")
MODES = ("ngram", "eagle3", "dflash")


@dataclass
class Labelled:
    workload: str
    phase: str                 # the kind of prompt of its bench.peer phase
    prompt: list[int]
    asked: Asked
    answer: list[int] = field(default_factory=list)
    # mode -> (drafts, accepted tokens)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)

    def tau(self, mode: str) -> float | None:
        drafts, accepted = self.counts.get(mode, (0, 0))
        return 1.0 + accepted / drafts if drafts else None


@dataclass
class Pool:
    """Step-weighted acceptance, as the policy pools a class's evidence."""

    drafts: int = 0
    accepted: int = 0

    def add(self, drafts: int, accepted: int) -> None:
        self.drafts += drafts
        self.accepted += accepted

    def tau(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts else None


def family(cls: str) -> str:
    return ":".join(cls.split(":")[:2])


def online_errors(requests: Sequence[Labelled], classes: Sequence[str],
                  guesses: dict[tuple[str, str], list[float]] | None = None
                  ) -> dict[str, dict[str, list[float]]]:
    """Absolute τ error per workload and mode, each request predicted from the ones
    before it (its class, else its family, else all), then learned. ``guesses``, if
    given, collects each prediction by (phase kind, mode)."""
    pools: dict[tuple[str, str], Pool] = {}
    errors: dict[str, dict[str, list[float]]] = {}
    for req, cls in zip(requests, classes, strict=True):
        for mode in MODES:
            actual = req.tau(mode)
            if actual is None:
                continue
            guess = next((got for key in (cls, family(cls), "") if
                          (got := pools.get((mode, key), Pool()).tau()) is not None), None)
            if guess is not None:
                errors.setdefault(req.workload, {}).setdefault(mode, []).append(
                    abs(guess - actual))
                if guesses is not None:
                    guesses.setdefault((req.phase, mode), []).append(guess)
            drafts, accepted = req.counts[mode]
            for key in {cls, family(cls), ""}:
                pools.setdefault((mode, key), Pool()).add(drafts, accepted)
    return errors


def conversations(workloads: Sequence[str]
                  ) -> list[tuple[str, str, tuple[dict[str, str], ...]]]:
    """(workload, phase kind, conversation) of each distinct conversation, in the
    order ``bench.peer`` first sends it."""
    from bench.peer_workloads import WORKLOADS

    seen: set[str] = set()
    out = []
    for name in workloads:
        for phase in WORKLOADS[name]:
            for conv in phase.prompts():
                key = json.dumps(conv)
                if key not in seen:
                    seen.add(key)
                    out.append((name, phase.kind, conv))
    return out


def measure(model_dir: Path, requests: list[Labelled], method: str | None,
            drafter: Path | None, k: int, max_tokens: int, dtype: str) -> None:
    """One engine serves every request at once (greedy); plain decoding keeps the
    answers, a drafter its per-request draft counts."""
    from vllm import SamplingParams

    from bench.offline_engine import draft_counts, histogram, offline_llm

    llm = offline_llm(model_dir, method, drafter, k, dtype, max_model_len=2048,
                      kv_cache_bytes=2 << 30)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outs = llm.generate([{"prompt_token_ids": r.prompt} for r in requests], params,
                        use_tqdm=False)
    for req, out in zip(requests, outs, strict=True):
        got = out.outputs[0]
        if method is None:
            req.answer = list(got.token_ids)
            continue
        hist = histogram(got)
        if hist is not None:
            req.counts[method] = draft_counts(hist)
    del llm
    gc.collect()


def mae(errors: dict[str, dict[str, list[float]]], workloads: Sequence[str],
        mode: str) -> tuple[float, int]:
    got = [e for w in workloads for e in errors.get(w, {}).get(mode, [])]
    return (sum(got) / len(got) if got else float("nan")), len(got)


def render(results: dict[str, dict[str, dict[str, list[float]]]], workloads: Sequence[str],
           measured: dict[str, dict[str, float]], held_out: Sequence[str]) -> str:
    lines = ["| workload | mode | mean τ | MAE, shape classes | MAE, keyword classes "
             "| MAE, one pool | requests |", "|---|---|---|---|---|---|---|"]
    for name in [*workloads, "held out"]:
        scope = held_out if name == "held out" else [name]
        for mode in MODES:
            cells = [mae(results[c], scope, mode) for c in ("shape", "keyword", "pooled")]
            mean = measured.get(name, {}).get(mode)
            lines.append(f"| {name} | {mode} | {'' if mean is None else f'{mean:.2f}'} | "
                         + " | ".join(f"{m:.3f}" for m, _ in cells) + f" | {cells[0][1]} |")
    return "\n".join(lines)


def render_phases(requests: Sequence[Labelled],
                  guesses: dict[str, dict[tuple[str, str], list[float]]]) -> str:
    """Per kind of phase: τ measured, and the mean prediction of each classifier. What
    routing needs is that a kind whose τ stands apart is predicted apart."""
    lines = ["| phase kind | mode | requests | τ measured | predicted, shape | "
             "predicted, keyword | predicted, one pool |", "|---|---|---|---|---|---|---|"]
    for phase in dict.fromkeys(r.phase for r in requests):
        for mode in MODES:
            taus = [t for r in requests if r.phase == phase and (t := r.tau(mode))]
            cells = [guesses[c].get((phase, mode), []) for c in ("shape", "keyword", "pooled")]
            if not taus or not cells[0]:
                continue
            lines.append(f"| {phase} | {mode} | {len(taus)} | {sum(taus) / len(taus):.2f} | "
                         + " | ".join(f"{sum(g) / len(g):.2f}" for g in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from bench.keyword_classes import keyword_class
    from engines.embedded import prepare_embedded
    from engines.prompt_lookup import LookupParams, replay
    from engines.tokenizer import ChatTurn, HfTokenizer
    from service.request_class import feature_class
    from service.settings import Settings, embedded_default_modes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="mixed,light,sharegpt,office")
    parser.add_argument("--held-out", default="sharegpt,office",
                        help="the workloads the classifiers were not written for")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--labels", type=Path, default=LABELS,
                        help="the engines' answers and draft counts, kept between runs")
    parser.add_argument("--measure", action="store_true",
                        help="measure again even if --labels holds the same requests")
    args = parser.parse_args(argv)
    workloads = args.workloads.split(",")
    settings = Settings()
    embedded = prepare_embedded(settings.cache_dir)
    tok = HfTokenizer(str(embedded.target_dir))
    requests = [Labelled(name, kind, tok.render_chat([ChatTurn(m["role"], m["content"])
                                                for m in conv]),
                         Asked(conv[-1]["content"],
                               "\n".join(m["content"] for m in conv[:-1]),
                               sum(m["role"] == "assistant" for m in conv)))
                for name, kind, conv in conversations(workloads)]
    print(f"{len(requests)} distinct requests", flush=True)
    modes = embedded_default_modes()
    kept = json.loads(args.labels.read_text()) if args.labels.exists() else None
    if (not args.measure and kept is not None and kept["max_tokens"] == args.max_tokens
            and kept["prompts"] == [r.prompt for r in requests]):
        for req, answer, counts in zip(requests, kept["answers"], kept["counts"], strict=True):
            req.answer = answer
            req.counts = {m: (c[0], c[1]) for m, c in counts.items()}
        print(f"engines' measurements from {args.labels}", flush=True)
    else:
        began = time.perf_counter()
        measure(embedded.target_dir, requests, None, None, 0, args.max_tokens,
                settings.resolved_dtype())
        for method, drafter in (("eagle3", embedded.eagle3_dir),
                                ("dflash", embedded.dflash_dir)):
            measure(embedded.target_dir, requests, method, drafter,
                    modes[method].num_speculative_tokens or 1, args.max_tokens,
                    settings.resolved_dtype())
            print(f"{method} measured, {time.perf_counter() - began:.0f} s", flush=True)
        args.labels.parent.mkdir(parents=True, exist_ok=True)
        args.labels.write_text(json.dumps({
            "max_tokens": args.max_tokens, "prompts": [r.prompt for r in requests],
            "answers": [r.answer for r in requests],
            "counts": [r.counts for r in requests]}) + "\n")
    ngram = modes["ngram"]
    lookup = LookupParams(ngram.prompt_lookup_min or 1, ngram.prompt_lookup_max or 1,
                          ngram.num_speculative_tokens or 1)
    for req in requests:
        got = replay(req.prompt, req.answer, lookup)
        req.counts["ngram"] = (got.num_drafts, got.num_accepted_tokens)

    classifiers: dict[str, Callable[[Labelled], str]] = {
        "shape": lambda r: feature_class(r.prompt, tok, asked=r.asked),
        "keyword": lambda r: keyword_class(r.prompt, tok),
        "pooled": lambda r: "auto:all:all",
    }
    guesses: dict[str, dict[tuple[str, str], list[float]]] = {c: {} for c in classifiers}
    results = {name: online_errors(requests, [f(r) for r in requests], guesses[name])
               for name, f in classifiers.items()}
    measured: dict[str, dict[str, float]] = {}
    for name in workloads:
        for mode in MODES:
            pool = Pool()
            for r in requests:
                if r.workload == name and mode in r.counts:
                    pool.add(*r.counts[mode])
            if (tau := pool.tau()) is not None:
                measured.setdefault(name, {})[mode] = tau
    held_out = [w for w in args.held_out.split(",") if w in workloads]
    table = render(results, workloads, measured, held_out)
    by_phase = render_phases(requests, guesses)
    print(table, "", by_phase, sep="\n")
    report: dict[str, Any] = {
        "workloads": workloads, "held_out": held_out, "max_tokens": args.max_tokens,
        "requests": len(requests),
        "classes": {name: sorted({f(r) for r in requests}) for name, f in classifiers.items()},
        "mae": {c: {w: {m: mae(res, [w], m)[0] for m in MODES} for w in workloads}
                for c, res in results.items()},
        "held_out_mae": {c: {m: mae(res, held_out, m)[0] for m in MODES}
                         for c, res in results.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    head = (f"# Acceptance predicted per request, {time.strftime('%Y-%m-%d')}\n\n"
            f"`python -m bench.predictor_eval --workloads {args.workloads} --held-out "
            f"{args.held_out}`: {len(requests)} distinct conversations, {args.max_tokens}-"
            "token greedy answers; τ per request measured by vLLM CPU engines (prompt "
            "lookup replayed); each request predicted from the requests before it only. "
            "MAE: mean absolute τ error per request.\n\n")
    args.out.with_suffix(".md").write_text(f"{head}{table}\n\n{by_phase}\n")


if __name__ == "__main__":
    main()

"""Stage 1: the target's own greedy answers, generated in batches by a vLLM engine (or,
on a machine without a vLLM build, by ``transformers``).

A drafter has to predict what the served model says, so it learns from the
model's own answers, not from someone else's text. Greedy answers also make
the target's argmax the next token, so plain cross-entropy is the right loss.

Rows are appended to ``answers.jsonl`` after every batch; a rerun skips the
prompt ids already there, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engines.tokenizer import ChatTurn, HfTokenizer
from training.progress import Progress
from training.prompts import Prompt


@dataclass(frozen=True)
class Sample:
    id: str
    kind: str
    prompt_ids: list[int]
    answer_ids: list[int]


def read_samples(path: Path) -> list[Sample]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(Sample(**json.loads(line)))
        except (ValueError, TypeError):
            break  # a line cut off by an interrupted write: resume from here
    return rows


def generate_answers(model_dir: Path, prompts: Sequence[Prompt], out: Path, *,
                     max_prompt_tokens: int = 384, max_answer_tokens: int = 256,
                     batch: int = 64, seed: int = 0,
                     known: Path | None = None, engine: str = "auto",
                     device: str = "cpu") -> list[Sample]:
    """``known``: answers generated before (gzipped JSONL of samples, e.g. the ones the
    project ships for its embedded model); a prompt found there with the same prompt
    tokens and an answer within ``max_answer_tokens`` is not generated again.

    ``engine``: ``vllm`` (batched serving engine, as served), ``transformers`` (plain
    batched greedy ``generate`` on ``device``, for a machine with a GPU but no vLLM
    build) or ``auto`` (vLLM where it is installed)."""
    done = read_samples(out)
    _rewrite_clean(out, done)
    have = {s.id for s in done}
    reuse = _known_answers(known)
    tok = HfTokenizer(str(model_dir))
    todo: list[tuple[Prompt, list[int]]] = []
    reused: list[Sample] = []
    for p in prompts:
        if p.id in have:
            continue
        ids = tok.render_chat([ChatTurn("user", p.text)])
        if len(ids) > max_prompt_tokens:
            continue
        old = reuse.get(p.id)
        if old is not None and old.prompt_ids == ids and \
                len(old.answer_ids) <= max_answer_tokens:
            reused.append(old)
        else:
            todo.append((p, ids))
    if reused:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write("".join(json.dumps(s.__dict__) + "\n" for s in reused))
        done += reused
        print(f"answers: {len(reused)} reused from {known}", flush=True)
    if todo:
        if _pick_engine(engine) == "vllm":
            _generate(model_dir, todo, out, done, max_prompt_tokens + max_answer_tokens,
                      max_answer_tokens, batch, seed)
        else:
            _generate_hf(model_dir, todo, out, done, max_answer_tokens, batch, device)
    # In prompt order, only the prompts asked for: the features stage shards on this.
    by_id = {s.id: s for s in done}
    return [by_id[p.id] for p in prompts if p.id in by_id]


def _generate(model_dir: Path, todo: list[tuple[Prompt, list[int]]], out: Path,
              done: list[Sample], max_len: int, max_answer_tokens: int, batch: int,
              seed: int) -> None:
    llm, params = _engine(model_dir, max_len, max_answer_tokens, seed)
    bar = Progress("answers", total=len(todo), unit="prompt")
    out.parent.mkdir(parents=True, exist_ok=True)
    tokens = 0
    began = time.monotonic()
    with out.open("a") as f:
        for start in range(0, len(todo), batch):
            chunk = todo[start:start + batch]
            results = llm.generate([{"prompt_token_ids": ids} for _, ids in chunk], params,
                                   use_tqdm=False)
            for (p, ids), r in zip(chunk, results, strict=True):
                answer = list(r.outputs[0].token_ids)
                tokens += len(answer)
                _keep(Sample(p.id, p.kind, ids, answer), done, f)
            f.flush()
            bar.advance(len(chunk), note=f"{tokens / (time.monotonic() - began):.0f} tok/s")
    bar.close()
    # The engine's worker process polls a core even when idle: end it before the
    # next stage needs the machine.
    llm.llm_engine.engine_core.shutdown()


def _pick_engine(engine: str) -> str:
    if engine != "auto":
        return engine
    import importlib.util

    return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"


def _generate_hf(model_dir: Path, todo: list[tuple[Prompt, list[int]]], out: Path,
                 done: list[Sample], max_answer_tokens: int, batch: int, device: str) -> None:
    """Greedy answers from the target in float32 (as served) through ``transformers``:
    prompts of like length batched together, left-padded; an answer ends at (and keeps)
    its first EOS, as vLLM's token ids do."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = model.to(device).eval()
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    pad = next(iter(stops))
    ranked = sorted(todo, key=lambda x: len(x[1]))
    bar = Progress("answers", total=len(ranked), unit="prompt")
    out.parent.mkdir(parents=True, exist_ok=True)
    tokens, began = 0, time.monotonic()
    with out.open("a") as f:
        for start in range(0, len(ranked), batch):
            chunk = ranked[start:start + batch]
            width = max(len(ids) for _, ids in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for i, (_, row) in enumerate(chunk):
                ids[i, width - len(row):] = torch.tensor(row)
                mask[i, width - len(row):] = 1
            with torch.inference_mode():
                gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                     max_new_tokens=max_answer_tokens, do_sample=False,
                                     pad_token_id=pad, eos_token_id=sorted(stops))
            for (p, row), new in zip(chunk, gen[:, width:].tolist(), strict=True):
                answer = []
                for t in new:
                    answer.append(t)
                    if t in stops:
                        break
                tokens += len(answer)
                _keep(Sample(p.id, p.kind, row, answer), done, f)
            f.flush()
            bar.advance(len(chunk), note=f"{tokens / (time.monotonic() - began):.0f} tok/s")
    bar.close()


def _engine(model_dir: Path, max_len: int, max_tokens: int, seed: int) -> tuple[Any, Any]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model_dir), max_model_len=max_len, enforce_eager=True, seed=seed,
              kv_cache_memory_bytes=2 * 1024**3, disable_log_stats=True)
    return llm, SamplingParams(temperature=0.0, max_tokens=max_tokens)


def _known_answers(path: Path | None) -> dict[str, Sample]:
    if path is None or not path.exists():
        return {}
    with gzip.open(path, "rt") as f:
        return {s.id: s for s in (Sample(**json.loads(line)) for line in f if line.strip())}


def known_answer_ids(path: Path | None, skip: set[str] | None = None) -> list[list[int]]:
    """The answer token ids of every known answer (less those in ``skip``)."""
    return [s.answer_ids for k, s in _known_answers(path).items() if k not in (skip or ())]


def save_known_answers(samples: Sequence[Sample], path: Path) -> None:
    """Write answers for reuse by ``known`` (sorted by id, so the file diffs well)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(s.__dict__) + "\n" for s in sorted(samples, key=lambda s: s.id))


def _rewrite_clean(out: Path, rows: list[Sample]) -> None:
    if out.exists():
        out.write_text("".join(json.dumps(s.__dict__) + "\n" for s in rows))


def _keep(sample: Sample, done: list[Sample], f: IO[str]) -> None:
    """One generated answer: kept for this run and appended to the resumable file."""
    done.append(sample)
    f.write(json.dumps(sample.__dict__) + "\n")

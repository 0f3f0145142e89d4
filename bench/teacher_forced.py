"""A drafter's teacher-forced accuracy on the held-out prompts, per kind.

The target's greedy answers to the held-out prompts (a vLLM engine, as in training),
their features, then per draft position the share of answer positions where the
drafter's argmax is the target's next token, given the true tokens before it. Set
beside ``bench.acceptance`` (the same prompts served by vLLM), it separates what
the drafter knows from what serving makes of it: a served figure far below the
teacher-forced one means a mismatch between training and drafting, or that the
positions a chain drafts from (after each rejection) are harder than the average.

    .venv/bin/python -m bench.teacher_forced --method eagle3 [--drafter DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

WORK = Path("bench/out/teacher_forced")


def main(argv: list[str] | None = None) -> None:
    import torch

    from engines.embedded import prepare_embedded
    from engines.embedded.target_shape import special_token_id
    from service.settings import Settings
    from training.answers import generate_answers
    from training.cli import DEFAULT_K, MASK_TOKEN
    from training.export import read_drafter
    from training.features import extract_features, feature_layers
    from training.prompts import heldout_prompts
    from training.train import TrainConfig, build_model, evaluate, load_examples, start_from
    from training.vocab import DraftVocab

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=["eagle3", "dflash"], required=True)
    parser.add_argument("--drafter", type=Path, help="drafter dir (default: shipped)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, help="draft length (EAGLE-3) or masked block "
                        "slots (DFlash) to walk and score; default: the method's default")
    args = parser.parse_args(argv)

    embedded = prepare_embedded(Settings().cache_dir)
    target = embedded.target_dir
    drafter = args.drafter or (embedded.eagle3_dir if args.method == "eagle3"
                               else embedded.dflash_dir)
    work = WORK / f"max{args.max_tokens}"
    samples = generate_answers(target, heldout_prompts(), work / "answers.jsonl",
                               max_answer_tokens=args.max_tokens)
    layers = feature_layers(json.loads((target / "config.json").read_text())
                            ["num_hidden_layers"])
    shards = extract_features(target, samples, work / "features", layers=layers)

    weights, d2t = read_drafter(args.method, drafter)
    draft_to_target = d2t.long() + torch.arange(int(d2t.numel()))
    target_vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    target_to_draft = torch.full((target_vocab,), -1, dtype=torch.long)
    target_to_draft[draft_to_target] = torch.arange(int(d2t.numel()))
    vocab = DraftVocab(draft_to_target, target_to_draft, 1.0)
    drafter_cfg = json.loads((drafter / "config.json").read_text())
    depth = drafter_cfg["num_hidden_layers"]
    k = args.k or DEFAULT_K[args.method]
    cfg = TrainConfig(method=args.method, steps_ahead=k,
                      eagle3_layers=depth, dflash_layers=depth,
                      dflash_kv_heads=drafter_cfg.get("num_key_value_heads"))
    model = build_model(cfg, target, vocab, len(layers), special_token_id(target, MASK_TOKEN))
    start_from(model, weights, d2t, vocab)
    examples = load_examples(shards, vocab, cfg.max_len)
    rows: dict[str, dict[str, float]] = {}
    walk = walk_eagle3 if args.method == "eagle3" else walk_dflash
    walked = walk(model, [(e.tokens, e.feats) for e in examples],
                  [len(s.prompt_ids) for s in samples], target_to_draft, k)
    rows["walked"] = walked
    print("walked", json.dumps(walked), flush=True)
    for kind in ("code", "copy", "chat", "all"):
        chosen = [e for e, s in zip(examples, samples, strict=True)
                  if kind in ("all", s.kind)]
        rows[kind] = {k: round(v, 3) for k, v in evaluate(cfg, model, chosen, "cpu").items()}
        print(kind, json.dumps(rows[kind]), flush=True)
    rows["k"] = {"k": k}
    (work / f"{args.method}.json").write_text(json.dumps(rows, indent=2) + "\n")


def walk_eagle3(model: Any, answers: list[tuple[Any, Any]], prompt_lens: list[int],
                target_to_draft: Any, k: int) -> dict[str, float]:
    """Serving, replayed on the teacher-forced drafts: each answer walked as vLLM drafts
    it (a chain of ``k`` from the last verified position, the correct prefix accepted,
    the next chain after the bonus token), a token outside the draft vocabulary a miss.
    Near the served figure, it says serving loses nothing the drafter knows: the gap to
    the teacher-forced figure is where chains start (after a rejection, harder than the
    average position) and the vocabulary."""
    import torch

    steps, per_position = 0, [0] * k
    with torch.inference_mode():
        for (tokens, feats), start in zip(answers, prompt_lens, strict=True):
            tokens = tokens.long()
            chains = torch.stack([step[0].argmax(-1) for step in
                                  model.unroll(tokens[None], feats[None].float(), k)], -1)
            # The chain drafted at position j follows the token at j + 1: anchor it there.
            by_anchor = torch.cat([torch.full((1, k), -1), chains[:-1]])
            steps += _walk_answer(by_anchor, target_to_draft[tokens], start, per_position)
    return _walk_figures(per_position, steps)


def walk_dflash(model: Any, answers: list[tuple[Any, Any]], prompt_lens: list[int],
                target_to_draft: Any, k: int) -> dict[str, float]:
    """``walk_eagle3`` for DFlash: one block per verification step, anchored at the
    token the target just gave (the bonus token), its ``k`` slots the drafts."""
    import torch

    steps, per_position = 0, [0] * k
    with torch.inference_mode():
        for (tokens, feats), start in zip(answers, prompt_lens, strict=True):
            tokens = tokens.long()
            anchors = torch.arange(len(tokens))[None]
            by_anchor = model.block_logits(tokens[None], feats[None].float(),
                                           anchors)[0].argmax(-1)   # [T, k]
            steps += _walk_answer(by_anchor, target_to_draft[tokens], start, per_position)
    return _walk_figures(per_position, steps)


def _walk_answer(by_anchor: Any, wanted: Any, start: int, per_position: list[int]) -> int:
    """One answer walked: ``by_anchor[p]`` the drafts proposed after the token at p,
    ``wanted`` the answer in draft ids (-1: not in the draft vocabulary), the first
    answer token (at ``start``) the first anchor. Counts accepted drafts per position
    into ``per_position``; returns the verification steps."""
    k, t = len(per_position), len(wanted)
    steps, p = 0, start
    while p + 1 < t:
        n = 0
        while n < k and p + 1 + n < t and wanted[p + 1 + n] >= 0 \
                and by_anchor[p, n] == wanted[p + 1 + n]:
            per_position[n] += 1
            n += 1
        steps += 1
        p += n + 1      # the accepted drafts, then the target's bonus token
    return steps


def _walk_figures(per_position: list[int], steps: int) -> dict[str, float]:
    out = {f"pos_{i + 1}": round(a / max(steps, 1), 3) for i, a in enumerate(per_position)}
    return {**out, "acceptance_length": round(1 + sum(per_position) / max(steps, 1), 3)}


if __name__ == "__main__":
    main()

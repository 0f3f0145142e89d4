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
    cfg = TrainConfig(method=args.method, steps_ahead=DEFAULT_K[args.method])
    model = build_model(cfg, target, vocab, len(layers), special_token_id(target, MASK_TOKEN))
    start_from(model, weights, d2t, vocab)
    examples = load_examples(shards, vocab, cfg.max_len)
    rows = {}
    for kind in ("code", "copy", "chat", "all"):
        chosen = [e for e, s in zip(examples, samples, strict=True)
                  if kind in ("all", s.kind)]
        rows[kind] = {k: round(v, 3) for k, v in evaluate(cfg, model, chosen, "cpu").items()}
        print(kind, json.dumps(rows[kind]), flush=True)
    (work / f"{args.method}.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

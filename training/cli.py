"""``specgate train-drafter``: every stage in order, each resumable from the work directory.

    specgate train-drafter --method eagle3 --out drafters/
    specgate train-drafter --method dflash --prompts my_prompts.jsonl --target /models/x

Work directory layout: ``answers.jsonl`` (stage 1), ``features/`` (stage 2),
``vocab.safetensors``, ``<method>/state.pt`` (stage 3, saved every few steps),
and the checkpoint in ``--out/<method>`` (stage 4) with its model card.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_K = {"eagle3": 3, "dflash": 4}
DEFAULT_LAYERS = {"eagle3": 1, "dflash": 2}
MASK_TOKEN = "<empty_output>"  # never produced in chat: DFlash's masked slots
# Answers of the embedded model to the built-in prompts, shipped so that the slowest
# stage need not run again (greedy, vLLM CPU 0.32, bf16, max 256 answer tokens).
KNOWN_ANSWERS = Path(__file__).parent / "data" / "answers"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train-drafter", help="train an EAGLE-3 or DFlash drafter for the "
                                             "served model (CPU or GPU)")
    p.add_argument("--method", choices=["eagle3", "dflash", "both"], required=True)
    p.add_argument("--target", type=Path, help="target model dir (default: embedded SmolLM2)")
    p.add_argument("--prompts", type=Path, help="JSONL ({'text': ...}) or one prompt per "
                                                "line (default: the built-in offline set, "
                                                "training/data/train.jsonl)")
    p.add_argument("--limit", type=int, default=1024, help="number of prompts used")
    p.add_argument("--skip", type=int, default=0,
                   help="leave out the first N prompts (a fine-tuning round on prompts the "
                        "starting drafter has not seen); --limit counts from there")
    p.add_argument("--work-dir", type=Path, help="resumable intermediate outputs "
                                                 "(default: <cache>/train/<target name>)")
    p.add_argument("--out", type=Path, default=Path("drafters"), help="checkpoint parent dir")
    p.add_argument("--k", type=int, help="EAGLE-3 draft length / DFlash masked slots "
                                         "(block size - 1); default 3 / 4")
    p.add_argument("--draft-vocab", type=int, default=8192)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eagle3-layers", type=int, default=DEFAULT_LAYERS["eagle3"],
                   help="EAGLE-3 depth; a deeper drafter fine-tuned from a shallower one "
                        "(--init-from) starts as exactly that drafter: its new layers begin "
                        "as identities")
    p.add_argument("--dflash-layers", type=int, default=DEFAULT_LAYERS["dflash"],
                   help="DFlash depth; grown from a shallower drafter (--init-from), the "
                        "new layers begin as identities, as EAGLE-3's do")
    p.add_argument("--dflash-window", type=int, default=32,
                   help="DFlash sliding-window attention span (0: full attention)")
    p.add_argument("--dflash-kv-heads", type=int,
                   help="DFlash key/value heads (default: the target's); grown from a "
                        "drafter with fewer (--init-from), each of its heads is repeated, "
                        "so the wider drafter starts exactly where it ended")
    p.add_argument("--dflash-anchors", type=int, default=64,
                   help="DFlash training blocks drawn per sequence and step")
    p.add_argument("--max-answer-tokens", type=int, default=256)
    p.add_argument("--known-answers", type=Path,
                   help="gzipped JSONL of answers generated before, reused where the "
                        "prompt matches (default for the embedded model: the answers the "
                        "project ships, training/data/answers/)")
    p.add_argument("--init-from", type=Path,
                   help="fine-tune: start from this exported drafter's weights and draft "
                        "vocabulary (one --method only) instead of the target's layers")
    p.add_argument("--keep-vocab", action="store_true",
                   help="with --init-from: keep every draft token of the starting drafter "
                        "(its output rows carry over whole) and grow to --draft-vocab with "
                        "the tokens the target says most across all answers held (this "
                        "run's and --known-answers'); without it the vocabulary is rebuilt "
                        "from this run's answers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answers-engine", choices=["auto", "vllm", "transformers"],
                   default="auto", help="what generates the target's answers: vLLM (the "
                   "default where it is installed) or plain transformers (a GPU machine "
                   "without a vLLM build)")
    p.add_argument("--answers-batch", type=int, default=64,
                   help="prompts per answer-generation batch")
    p.add_argument("--distill", type=float, default=0.0,
                   help="weight (0-1) of distillation: the drafter also learns the "
                        "target's whole next-token distribution over the draft vocabulary, "
                        "not only its greedy token (features then hold the target's final "
                        "hidden state: the whole target runs in stage 2)")
    p.add_argument("--batch-tokens", type=int, default=6144,
                   help="tokens per training step (raise with the learning rate on a GPU)")
    p.add_argument("--max-train-minutes", type=float,
                   help="wall-clock budget of the training stage: the learning-rate "
                        "schedule runs on whichever of steps (--epochs) and time is further "
                        "along, and training ends when either is spent (a GPU rented by "
                        "the minute)")
    p.add_argument("--features-on-device", action="store_true",
                   help="keep the target's hidden states in the training device's memory "
                        "instead of shards on disk (a GPU with room for them: 3.4 kB per "
                        "token for the embedded model); not resumable, and faster")


def check_args(args: argparse.Namespace) -> None:
    """Refuse impossible combinations before any stage runs (answers can take an hour)."""
    if args.init_from and args.method == "both":
        raise SystemExit("--init-from takes one --method (eagle3 or dflash), not both")
    if args.keep_vocab and not args.init_from:
        raise SystemExit("--keep-vocab keeps the vocabulary of the --init-from drafter: "
                         "give one")
    if not 0.0 <= args.distill <= 1.0:
        raise SystemExit(f"--distill takes a weight from 0 to 1, not {args.distill}")
    if args.max_train_minutes is not None and args.max_train_minutes <= 0:
        raise SystemExit(f"--max-train-minutes takes a positive budget, not "
                         f"{args.max_train_minutes}")
    if args.dflash_kv_heads is not None and args.method == "eagle3":
        raise SystemExit("--dflash-kv-heads shapes a DFlash drafter: use it with --method "
                         "dflash or both")


def check_target_args(args: argparse.Namespace, target: Path) -> None:
    """What the target's shape decides, also before any stage runs."""
    heads = int(json.loads((target / "config.json").read_text())["num_attention_heads"])
    kv = args.dflash_kv_heads
    if kv is not None and (kv <= 0 or heads % kv):
        raise SystemExit(f"--dflash-kv-heads must divide the target's {heads} attention "
                         f"heads (each key/value head serves a whole group), not {kv}")


def run(args: argparse.Namespace, cache_dir: Path) -> None:
    from training.prompts import builtin_training_prompts, prompts_from_file, save_prompts

    check_args(args)
    target = args.target or _embedded_target(cache_dir)
    check_target_args(args, target)
    # Stage 0: the prompts, saved once so that a resumed run sees the same list.
    work = args.work_dir or cache_dir / "train" / (args.target.name if args.target
                                                   else "SmolLM2-135M-Instruct")
    snapshot = work / "prompts.jsonl"
    if not snapshot.exists():
        source = args.prompts
        save_prompts(snapshot, prompts_from_file(source) if source else
                     builtin_training_prompts())
    prompts = prompts_from_file(snapshot)[args.skip:args.skip + args.limit]
    # A slice that does not start at the first prompt keeps its own features and
    # vocabulary, so it never evicts (or takes) the shards of a run from the start.
    slice_tag = f"-from{args.skip}" if args.skip else ""

    from engines.embedded.target_shape import special_token_id
    from training.answers import generate_answers
    from training.device import training_device
    from training.export import export_drafter
    from training.features import (
        Shard,
        extract_features,
        feature_layers,
        features_on_device,
    )
    from training.train import TrainConfig, build_model, load_examples, save_metrics, train

    device = training_device()
    layers = feature_layers(json.loads((target / "config.json").read_text())
                            ["num_hidden_layers"])
    print(f"[1/4] answers: {len(prompts)} prompts -> {work / 'answers.jsonl'}", flush=True)
    began = time.monotonic()
    known = args.known_answers or (KNOWN_ANSWERS / f"{target.name}.jsonl.gz")
    samples = generate_answers(target, prompts, work / "answers.jsonl",
                               max_answer_tokens=args.max_answer_tokens, seed=args.seed,
                               known=known, engine=args.answers_engine,
                               batch=args.answers_batch, device=device)
    print(f"[2/4] features: layers {layers} on {device}", flush=True)
    shards: Sequence[Path | Shard]
    if args.features_on_device:
        shards = features_on_device(target, samples, layers=layers, device=device,
                                    final=args.distill > 0)
    else:
        shards = extract_features(target, samples, work / f"features{slice_tag}",
                                  layers=layers, device=device, final=args.distill > 0)
    vocab = _vocab(work, samples, args.draft_vocab, target, slice_tag,
                   args.init_from if args.keep_vocab else None, known)
    print(f"      draft vocabulary {vocab.size}: covers {vocab.coverage:.1%} of answer tokens")
    mask_id = special_token_id(target, MASK_TOKEN)
    for method in (["eagle3", "dflash"] if args.method == "both" else [args.method]):
        k = args.k or DEFAULT_K[method]
        cfg = TrainConfig(method=method, epochs=args.epochs, lr=args.lr, steps_ahead=k,
                          batch_tokens=args.batch_tokens,
                          dflash_layers=args.dflash_layers, seed=args.seed,
                          eagle3_layers=args.eagle3_layers,
                          anchors_per_seq=args.dflash_anchors,
                          dflash_window=args.dflash_window or None,
                          dflash_kv_heads=args.dflash_kv_heads,
                          distill=args.distill,
                          max_seconds=(None if args.max_train_minutes is None
                                       else args.max_train_minutes * 60))
        print(f"[3/4] training {method} (K={k}) on {device}", flush=True)
        examples = load_examples(shards, vocab, cfg.max_len, final=cfg.distill > 0)
        model = build_model(cfg, target, vocab, len(layers), mask_id)
        if args.init_from:
            from training.export import read_drafter
            from training.train import start_from

            kept = start_from(model, *read_drafter(method, args.init_from), vocab)
            print(f"      starting from {args.init_from}: its weights, and its output rows "
                  f"for {kept} of {vocab.size} draft tokens", flush=True)
        trained = time.monotonic()
        # Each run keeps its own state (by method, prompts and starting point): a resumed
        # run must not take a base's or another round's.
        n_layers = cfg.eagle3_layers if method == "eagle3" else cfg.dflash_layers
        depth = f"-{n_layers}layers" if n_layers != DEFAULT_LAYERS[method] else ""
        depth += f"-k{k}" if k != DEFAULT_K[method] else ""
        depth += f"-distill{cfg.distill:g}" if cfg.distill > 0 else ""
        if method == "dflash":
            depth += f"-kv{cfg.dflash_kv_heads}" if cfg.dflash_kv_heads else ""
            depth += f"-window{cfg.dflash_window or 0}" if cfg.dflash_window != 32 else ""
        run_dir = work / (_run_name(method, len(prompts), args.init_from) + depth + slice_tag)
        metrics = train(cfg, model, examples, run_dir / "state.pt", device)
        save_metrics(run_dir / "metrics.json", cfg, metrics)
        out = args.out / method
        card = {
            "target": target.name, "method": method,
            "draft tokens (K)": k,
            "layers": cfg.eagle3_layers if method == "eagle3" else cfg.dflash_layers,
            "draft vocabulary": f"{vocab.size} ({vocab.coverage:.1%} "
                                                       "of answer tokens)",
            "training samples": len(examples),
            "training tokens": sum(int(e.tokens.numel()) for e in examples),
            "epochs": args.epochs, "learning rate": args.lr, "seed": args.seed,
            **({"distillation weight": args.distill} if args.distill > 0 else {}),
            **({"initialised from": args.init_from.name} if args.init_from else {}),
            "target layers read": layers,
            "training time (this stage)": f"{time.monotonic() - trained:.0f} s on {device}",
            "pipeline time so far": f"{time.monotonic() - began:.0f} s",
            **{k2: round(v, 3) for k2, v in metrics.items()},
        }
        print(f"[4/4] writing {out}: {json.dumps(metrics)}", flush=True)
        export_drafter(method, model, vocab, target, layers, out, block=k + 1,
                       mask_token_id=mask_id, card=card, window=cfg.dflash_window)


def _run_name(method: str, prompts: int, init_from: Path | None) -> str:
    if init_from is None:
        return f"{method}-n{prompts}"
    origin = hashlib.sha1(str(init_from.resolve()).encode()).hexdigest()[:8]
    return f"{method}-n{prompts}-from-{init_from.name}-{origin}"


def _vocab(work: Path, samples: Any, size: int, target: Path, tag: str = "",
           init_from: Path | None = None, known: Path | None = None) -> Any:
    """Built once per sample set and saved, so a resumed run trains on the same
    vocabulary (and a run on more prompts builds its own).

    By default the most frequent tokens of this run's answers. ``init_from`` (a fine-tune
    with ``--keep-vocab``) keeps every token of the starting drafter instead, grown to
    ``size`` with the most frequent others over all the answers held (this run's and
    the ``known`` ones): the new rows are the tokens the target says most often anywhere,
    not only in this run's slice."""
    import torch
    from safetensors.torch import load_file, save_file

    from training.answers import known_answer_ids
    from training.vocab import DraftVocab, build_vocab

    cfg = json.loads((target / "config.json").read_text())
    eos = cfg.get("eos_token_id", 2)
    always = [eos] if isinstance(eos, int) else list(eos)
    answers = [s.answer_ids for s in samples]
    grow = ""
    if init_from is not None:
        d2t = load_file(str(init_from / "model.safetensors"))["d2t"].long()
        if d2t.numel() > size:
            raise SystemExit(f"--keep-vocab: {init_from} proposes {d2t.numel()} draft tokens, "
                             f"more than --draft-vocab {size}")
        always += (d2t + torch.arange(int(d2t.numel()))).tolist()
        answers += known_answer_ids(known, skip={s.id for s in samples})
        grow = f"-kept{d2t.numel()}-{hashlib.sha1(d2t.numpy().tobytes()).hexdigest()[:8]}"
    path = work / f"vocab-{size}-n{len(samples)}{tag}{grow}.safetensors"
    if path.exists():
        t = load_file(str(path))
        return DraftVocab(t["draft_to_target"], t["target_to_draft"], float(t["coverage"]))
    vocab = build_vocab(answers, size, cfg["vocab_size"], always=always)
    save_file({"draft_to_target": vocab.draft_to_target,
               "target_to_draft": vocab.target_to_draft,
               "coverage": torch.tensor(vocab.coverage)}, str(path))
    return vocab


def _embedded_target(cache_dir: Path) -> Path:
    from engines.embedded import prepare_embedded

    return prepare_embedded(cache_dir).target_dir


def main() -> None:
    """``python -m training.cli``: the same command without the gateway's dependencies
    (a training machine needs torch, transformers and safetensors only)."""
    import os

    parser = argparse.ArgumentParser(prog="python -m training.cli")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args()
    cache = Path(os.environ.get("SPECGATE_CACHE_DIR", Path.home() / ".cache" / "specgate"))
    run(args, cache)


if __name__ == "__main__":
    main()

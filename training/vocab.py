"""The draft vocabulary: the target tokens the drafter can propose.

A drafter's output head over the whole 49k vocabulary costs several times its
one layer on a CPU, so it keeps the most frequent answer tokens. vLLM maps a
draft id d to target id ``d + d2t[d]``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DraftVocab:
    draft_to_target: torch.Tensor  # [V_draft] target ids, ascending
    target_to_draft: torch.Tensor  # [V_target] draft id or -1
    coverage: float  # share of answer tokens the draft vocabulary contains

    @property
    def size(self) -> int:
        return int(self.draft_to_target.numel())

    def d2t(self) -> torch.Tensor:
        return self.draft_to_target - torch.arange(self.size)

    def to_draft(self, target_ids: torch.Tensor) -> torch.Tensor:
        return self.target_to_draft[target_ids]


def build_vocab(answers: Iterable[list[int]], size: int, target_vocab: int,
                always: Iterable[int] = ()) -> DraftVocab:
    counts: Counter[int] = Counter()
    for ids in answers:
        counts.update(ids)
    chosen = set(always)
    for tok, _ in counts.most_common():
        if len(chosen) >= size:
            break
        chosen.add(tok)
    # Pad with the lowest unused ids so the size is what was asked for.
    filler = (i for i in range(target_vocab) if i not in chosen)
    while len(chosen) < size:
        chosen.add(next(filler))
    ordered = torch.tensor(sorted(chosen), dtype=torch.long)
    back = torch.full((target_vocab,), -1, dtype=torch.long)
    back[ordered] = torch.arange(size)
    total = sum(counts.values())
    covered = sum(c for tok, c in counts.items() if tok in chosen)
    return DraftVocab(ordered, back, covered / total if total else 0.0)

"""The one place that picks where training runs: a GPU when torch sees one, else the CPU."""

from __future__ import annotations

import os


def training_device() -> str:
    import torch

    forced = os.environ.get("SPECGATE_TRAIN_DEVICE")
    if forced:
        return forced
    return "cuda" if torch.cuda.is_available() else "cpu"

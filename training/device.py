"""The one place that picks where training runs and at what precision: a GPU when torch
sees one, else the CPU; bf16 matrix products where the hardware has them."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path


def training_device() -> str:
    import torch

    forced = os.environ.get("SPECGATE_TRAIN_DEVICE")
    if forced:
        return forced
    return "cuda" if torch.cuda.is_available() else "cpu"


def bf16_autocast(device: str) -> bool:
    """Train under bf16 autocast on GPUs and on CPUs with bf16 matrix units (AMX or
    AVX-512 BF16: about 8x float32 on 2 Sapphire Rapids cores); elsewhere float32,
    since without them bf16 products are emulated and far slower than float32 (0.3
    against 167 GFLOP/s measured on a 2-core AVX2 EPYC). ``SPECGATE_TRAIN_BF16=0|1``
    overrides."""
    forced = os.environ.get("SPECGATE_TRAIN_BF16")
    if forced in ("0", "1"):
        return forced == "1"
    if device.split(":")[0] == "cuda":
        return True
    return bool(_cpu_flags() & {"amx_bf16", "avx512_bf16"})


@cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()

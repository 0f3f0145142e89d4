"""A progress bar with rate and time left for every stage (tqdm, already a vLLM dependency)."""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, stage: str, total: int, unit: str) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=stage, unit=unit, file=sys.stderr,
                         dynamic_ncols=True, mininterval=2.0, smoothing=0.1)

    def advance(self, n: int = 1, note: str | None = None) -> None:
        if note:
            self._bar.set_postfix_str(note, refresh=False)
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()

"""Where a client script points: ``script.py BASE_URL MODEL`` or the environment
variables SPECGATE_BASE_URL (the gateway's /v1 URL) and SPECGATE_MODEL."""

from __future__ import annotations

import os
import sys


def target() -> tuple[str, str]:
    args = sys.argv[1:]
    base = args[0] if args else os.environ.get("SPECGATE_BASE_URL")
    model = args[1] if len(args) > 1 else os.environ.get("SPECGATE_MODEL")
    if not base or not model:
        sys.exit("usage: script.py BASE_URL MODEL (or SPECGATE_BASE_URL, SPECGATE_MODEL)")
    return base.rstrip("/"), model


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"FAILED: {what}")

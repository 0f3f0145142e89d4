"""A mode with vLLM's per-batch K table (``num_speculative_tokens_per_batch_size``) on
the CPU build: the table reaches the engine, which drafts alone and stops drafting
in a batch, and greedy text stays that of plain decoding."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from bench.gateway_process import GatewayNotReady, GatewayProcess

CONFIG = """\
modes:
  standard: {}
  eagle3_k:
    method: eagle3
    model: "embedded:eagle3"
    num_speculative_tokens: 3
    num_speculative_tokens_per_batch_size: [[1, 1, 3], [2, 256, 0]]
"""
PROMPT = "Write a Python function that reverses a string."


async def complete(h: httpx.AsyncClient, mode: str, model: str) -> str:
    r = await h.post("/v1/chat/completions", headers={"x-spec-mode": mode}, json={
        "model": model, "temperature": 0, "max_tokens": 40,
        "messages": [{"role": "user", "content": PROMPT}]})
    assert r.status_code == 200, r.text
    assert r.headers["x-spec-mode"] == mode
    return str(r.json()["choices"][0]["message"]["content"])


def drafts(process: GatewayProcess) -> int:
    engines = httpx.get(process.url + "/ready", timeout=10).json()["engines"]
    return int(engines["eagle3_k"]["spec_decode"]["drafts"])


async def test_a_k_table_drafts_alone_and_not_in_a_batch(tmp_path: Path) -> None:
    config = tmp_path / "k_table.yaml"
    config.write_text(CONFIG)
    process = GatewayProcess(tmp_path / "specgate.log", {
        "SPECGATE_CONFIG": str(config), "SPECGATE_MAX_MODEL_LEN": "1024"})
    try:
        process.start()
        process.wait_ready()
    except GatewayNotReady as e:
        process.stop()
        pytest.fail(str(e))
    try:
        async with httpx.AsyncClient(base_url=process.url, timeout=300) as h:
            model = (await h.get("/v1/models")).json()["data"][0]["id"]
            plain = await complete(h, "standard", model)
            alone = await complete(h, "eagle3_k", model)
            after_alone = drafts(process)
            assert after_alone > 0, "K = 3 at batch 1: the engine drafts"
            assert alone == plain
            together = await asyncio.gather(*(complete(h, "eagle3_k", model)
                                              for _ in range(8)))
            # K = 0 from batch 2: eight requests drafting at every step would add about
            # 8 x ``after_alone`` drafts. Together they add far fewer: only the steps one
            # of them runs alone draft (about 1 here when the machine is quiet). On a
            # loaded machine the first can run a while before the others arrive, and the
            # last on after them, as if some had run alone start to end; so the bound is
            # half of what drafting throughout would add.
            added = drafts(process) - after_alone
            assert added < 4 * after_alone, (added, after_alone, process.log_tail())
            assert all(text == plain for text in together)
    finally:
        process.stop()

"""The adaptive policy on real engines: it learns which mode serves each workload best.

The embedded model ships trained EAGLE-3 and DFlash drafters, so the policy must
learn a real (nonzero) acceptance for each; n-gram prompt lookup accepts most
drafts on copy-heavy prompts (and, with this small model, a fair share on free
text too: its answers repeat themselves). Forced traffic teaches the policy and,
timed, says which mode really is fastest per workload; auto traffic then must go
there, visibly in ``x-spec-decision`` and ``GET /admin/policy``.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.real.conftest import ADMIN_KEY, RealGateway

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
PASSAGE = ("The quick brown fox jumps over the lazy dog near the quiet river bank, "
           "while the old miller counts his sacks of golden wheat one by one.")
MODES = ("standard", "ngram", "eagle3", "dflash")
WORKLOADS = {
    "copy": [f"Repeat this text exactly, twice: {PASSAGE}",
             f"Copy the following sentence word for word: {PASSAGE}"],
    "chat": ["Write a short poem about autumn leaves.",
             "Give me three ideas for a birthday party."],
}


async def chat(h: httpx.AsyncClient, gw: RealGateway, prompt: str, cls: str,
               mode: str | None = None) -> httpx.Response:
    headers = {"x-workload-class": cls}
    if mode is not None:
        headers["x-spec-mode"] = mode
    r = await h.post("/v1/chat/completions", headers=headers, json={
        "model": gw.model, "temperature": 0, "max_tokens": 64,
        "messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200, r.text
    return r


async def forced_speeds(h: httpx.AsyncClient, gw: RealGateway, repeats: int = 2,
                        modes: tuple[str, ...] = MODES,
                        workloads: dict[str, list[str]] | None = None
                        ) -> dict[str, dict[str, float]]:
    """Forced traffic: it teaches the policy, and its wall time is the ground truth of
    which mode is fastest for each workload (completion tokens per second).

    Side by side: each prompt goes to every mode in turn, the order rotating, so that a
    slow spell of a shared machine lands on all modes alike. Timed one mode after
    another instead, two modes level on free text traded places between runs (n-gram
    17.7 against EAGLE-3 20.5 tokens/s in one CI run, 19.8 against 19.6 when the same
    traffic was rerun), and the policy, which rated them level, was failed for choosing
    the one a slow spell had hit."""
    workloads = WORKLOADS if workloads is None else workloads
    tokens = {cls: dict.fromkeys(modes, 0) for cls in workloads}
    seconds = {cls: dict.fromkeys(modes, 0.0) for cls in workloads}
    turn = 0
    for cls, prompts in workloads.items():
        for prompt in prompts * repeats:
            shift = turn % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                began = time.monotonic()
                r = await chat(h, gw, prompt, cls, mode)
                seconds[cls][mode] += time.monotonic() - began
                tokens[cls][mode] += r.json()["usage"]["completion_tokens"]
            turn += 1
    return {cls: {mode: tokens[cls][mode] / seconds[cls][mode] for mode in modes}
            for cls in workloads}


async def confirmed_speed(h: httpx.AsyncClient, gw: RealGateway, cls: str, chosen: str,
                          speed: dict[str, float]) -> tuple[float, float]:
    """The chosen mode's speed and the fastest's, timed again side by side where the
    first timing put the choice below 0.8 of the fastest. One timing of a few prompts
    can catch a mode in a fast spell that its measured steps and acceptance, all the
    policy rates it on, do not show; a choice that really is slow stays slow when
    timed again."""
    fastest = max(speed, key=speed.__getitem__)
    if chosen == fastest or speed[chosen] >= 0.8 * speed[fastest]:
        return speed[chosen], speed[fastest]
    again = (await forced_speeds(h, gw, modes=(chosen, fastest),
                                 workloads={cls: WORKLOADS[cls]}))[cls]
    return again[chosen], again[fastest]


async def test_auto_moves_to_the_mode_that_measured_best(real_gateway: RealGateway) -> None:
    async with httpx.AsyncClient(base_url=real_gateway.url, timeout=600) as h:
        r = await h.put("/admin/policy", headers=AUTH,
                        json={"exploration_share": 0.0, "hysteresis": 0.05})
        assert r.status_code == 200, r.text
        speed = await forced_speeds(h, real_gateway)
        await asyncio.sleep(1.0)  # a few sync periods: the store has every observation
        policy = (await h.get("/admin/policy", headers=AUTH)).json()
        copy, free = policy["acceptance"]["copy"], policy["acceptance"]["chat"]
        assert copy["ngram"]["acceptance_rate"] > free["ngram"]["acceptance_rate"]
        assert copy["ngram"]["mean_accepted_length"] > 1.5
        # Trained drafters: the policy learned a real, nonzero acceptance for each (a
        # random drafter measures 1.00; on these prompts the shipped ones measured
        # 1.15-1.3, EAGLE-3 weakest on verbatim copying, where n-gram wins anyway).
        for mode, floor in (("eagle3", 1.03), ("dflash", 1.02)):
            assert free[mode]["mean_accepted_length"] > floor, (mode, free[mode])
            assert copy[mode]["mean_accepted_length"] > floor, (mode, copy[mode])
        assert all(policy["load"][mode]["step_profile"] for mode in MODES)

        chosen: dict[str, str] = {}
        for cls, prompts in WORKLOADS.items():
            r = await chat(h, real_gateway, prompts[0], cls)
            mode, reason = r.headers["x-spec-mode"], r.headers["x-spec-decision"]
            # The two trained drafters run within a few percent of each other on chat,
            # and a forced mode timed over these few prompts on 2 shared cores swings
            # more than that from run to run; 0.8 of the fastest still fails a clearly
            # slower choice (plain decoding on chat, or a random drafter).
            mine, best = await confirmed_speed(h, real_gateway, cls, mode, speed[cls])
            assert mine >= 0.8 * best, (cls, mode, reason, speed, policy["acceptance"][cls])
            assert reason.startswith((f"cost:{mode} +", f"hold:{mode}")), reason
            chosen[cls] = mode
        policy = (await h.get("/admin/policy", headers=AUTH)).json()
        assert policy["previous_winner"]["copy"] == chosen["copy"]

        # Without prompt lookup, free text goes to the fastest of what is left as
        # measured, whatever the priors promised.
        enabled = ("standard", "eagle3", "dflash")
        r = await h.put("/admin/policy", headers=AUTH, json={"enabled_modes": list(enabled)})
        assert r.status_code == 200
        r = await chat(h, real_gateway, WORKLOADS["chat"][0], "chat")
        mode = r.headers["x-spec-mode"]
        assert mode in enabled, r.headers["x-spec-decision"]
        # The same 0.8 as above: EAGLE-3 and DFlash are within a few percent on chat (one
        # CI run: auto chose DFlash at +7%, forced DFlash 25.2 against EAGLE-3 28.5).
        mine, best = await confirmed_speed(h, real_gateway, "chat", mode,
                                           {m: speed["chat"][m] for m in enabled})
        assert mine >= 0.8 * best, (mode, r.headers["x-spec-decision"], speed)
        await h.put("/admin/policy", headers=AUTH, json={
            "enabled_modes": None, "exploration_share": 0.03, "hysteresis": 0.1})

"""Turn settings into real components: the model on disk, its tokenizer, vLLM engines."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import httpx

from engines.base import Engine
from engines.drafter_card import heldout_tau
from engines.engine_spec import EngineSpec
from engines.prompt_lookup import LookupParams
from engines.remote import RemoteVllmEngine
from engines.tokenizer import HfTokenizer
from engines.tool_calls import ToolCallParser
from service.mode_info import ModeInfo
from service.runtime import Components
from service.settings import EMBEDDED_DRAFTER_PREFIX, ModeSettings, Settings

log = logging.getLogger(__name__)

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"


def served_model_name(settings: Settings) -> str:
    if settings.served_model_name:
        return settings.served_model_name
    if settings.model is None:
        return EMBEDDED_MODEL_NAME
    return Path(settings.model).name or settings.model


async def load_components(settings: Settings) -> Components:
    drafters: dict[str, str] = {}
    chat_template = settings.chat_template.read_text() if settings.chat_template else None
    tool_template = None
    if settings.model is None:
        from engines.embedded import TOOL_CHAT_TEMPLATE, prepare_embedded

        embedded = await asyncio.to_thread(prepare_embedded, settings.cache_dir, log.info)
        model_dir = str(embedded.target_dir)
        drafters = {"eagle3": str(embedded.eagle3_dir), "dflash": str(embedded.dflash_dir)}
        # SmolLM2's own template has no tools; an operator's template replaces both.
        tool_template = None if chat_template else TOOL_CHAT_TEMPLATE.read_text()
    else:
        model_dir = settings.model
    tokenizer = await asyncio.to_thread(HfTokenizer, model_dir, chat_template, tool_template)
    tool_parser = _tool_parser(settings, tokenizer)
    if tool_parser is not None:
        await asyncio.to_thread(tool_parser.load)  # a wrong name fails the start-up
    modes = settings.resolved_modes()
    engines: dict[str, Engine] = {}
    info: dict[str, ModeInfo] = {}
    # One client for every remote engine: pooled connections, one set of limits.
    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000,
                                                   max_keepalive_connections=100))
    cpus = os.cpu_count() or 1
    # Only in-process engines need vLLM here; a remote-only gateway may run without it.
    in_process = any(not m.url for m in modes.values())
    if in_process:
        from engines.vllm_engine import cpu_build_installed
    cpu_build = in_process and cpu_build_installed()
    for name, mode in modes.items():
        # Every CPU engine gets every core, as a single-method vLLM server would: an
        # engine bound to a share of the cores runs at that share of the machine even
        # when it is the only one busy. The engines are one device group, so routing
        # keeps one of them busy at a time (docs/policy.md, "Device groups").
        bind = (mode.cpu_threads_bind or _all_cores(cpus)) if cpu_build and not mode.url \
            else None
        if mode.url:
            engines[name] = RemoteVllmEngine(name, mode.url, client, model=mode.served_model,
                                             speculative=mode.method is not None)
        else:
            engines[name] = _make_engine(settings, name, mode, model_dir, drafters, bind)
        lookup = LookupParams.from_config(mode.speculative_config() or {})
        info[name] = ModeInfo(method=mode.method,
                              num_speculative_tokens=mode.num_speculative_tokens or 0,
                              gpu_group=mode.gpu_group or ("cpu" if bind else "0"),
                              exclusive=bind is not None and not mode.gpu_group,
                              k_schedule=mode.k_schedule(),
                              card_tau=_card_tau(mode, drafters, lookup),
                              lookup=lookup)
    if in_process:
        _share_devices(engines, info)
    return Components(model_name=served_model_name(settings), tokenizer=tokenizer,
                      engines=engines, max_model_len=settings.max_model_len, mode_info=info,
                      closers=[client.aclose], tool_parser=tool_parser)


def _card_tau(mode: ModeSettings, drafters: dict[str, str],
              lookup: LookupParams | None = None) -> dict[str, float]:
    """An in-process drafter's held-out acceptance by kind, from its model card; prompt
    lookup's from what it drafts (``LookupParams.card``)."""
    if lookup is not None:
        return lookup.card()
    config = mode.speculative_config()
    if mode.url or config is None:
        return {}
    model = _resolve_drafter(config, drafters).get("model")
    return heldout_tau(model) if isinstance(model, str) and Path(model).is_dir() else {}


def _tool_parser(settings: Settings, tokenizer: HfTokenizer) -> ToolCallParser | None:
    name = settings.resolved_tool_call_parser()
    return None if name is None else ToolCallParser(name, tokenizer.hf_tokenizer)


def _all_cores(cpus: int) -> str:
    return "0" if cpus <= 1 else f"0-{cpus - 1}"


def _share_devices(engines: dict[str, Engine], info: dict[str, ModeInfo]) -> None:
    """The in-process engines of each device group learn of one another, so that none
    times its steps while another takes turns with it (``engines.vllm_engine``)."""
    from engines.vllm_engine import VllmEngine, share_device

    groups: dict[str, list[VllmEngine]] = {}
    for name, engine in engines.items():
        if isinstance(engine, VllmEngine):
            groups.setdefault(info[name].gpu_group, []).append(engine)
    for members in groups.values():
        share_device(members)


def _make_engine(settings: Settings, name: str, mode: ModeSettings, model_dir: str,
                 drafters: dict[str, str], cpu_bind: str | None) -> Engine:
    from engines.vllm_engine import VllmEngine

    spec_config = mode.speculative_config()
    if spec_config is not None:
        spec_config = _resolve_drafter(spec_config, drafters)
    kv_gib = mode.kv_cache_gib if mode.kv_cache_gib is not None else settings.kv_cache_gib
    spec = EngineSpec(
        mode=name, model=model_dir, speculative_config=spec_config,
        kv_cache_bytes=int(kv_gib * 1024**3), max_model_len=settings.max_model_len,
        dtype=settings.resolved_dtype(), enforce_eager=settings.enforce_eager,
        cpu_threads_bind=cpu_bind)
    return VllmEngine(spec)


def _resolve_drafter(config: dict[str, Any], drafters: dict[str, str]) -> dict[str, Any]:
    model = config.get("model")
    if isinstance(model, str) and model.startswith(EMBEDDED_DRAFTER_PREFIX):
        key = model.removeprefix(EMBEDDED_DRAFTER_PREFIX)
        if key not in drafters:
            raise ValueError(f"{model!r} names an embedded drafter, which exists only with "
                             f"the embedded default model (known: {sorted(drafters)})")
        return {**config, "model": drafters[key]}
    return config

"""The one settings object: defaults < config file < ``SPECGATE_*`` env < CLI flags."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from engines.engine_spec import DType
from policies.adaptive_settings import AdaptiveSettings
from service.keys import check_key, read_key_file

AUTO = "auto"
EMBEDDED_DRAFTER_PREFIX = "embedded:"
_MODE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
OperationalEndpoint = Literal["/health", "/ready", "/metrics"]
OPERATIONAL_ENDPOINTS: tuple[OperationalEndpoint, ...] = ("/health", "/ready", "/metrics")
MIB = 1024 * 1024


def _check_k_table(table: list[tuple[int, int, int]]) -> None:
    """What vLLM would refuse at engine start, refused at settings load instead."""
    previous = 0
    for first, last, k in sorted(table):
        if first < 1 or last < first or k < 0:
            raise ValueError(f"num_speculative_tokens_per_batch_size: [{first}, {last}, {k}] "
                             "needs 1 <= first batch <= last batch and K >= 0")
        if first <= previous:
            raise ValueError("num_speculative_tokens_per_batch_size: ranges overlap at "
                             f"batch {first}")
        if previous == 0 and first != 1:
            raise ValueError("num_speculative_tokens_per_batch_size: the first range must "
                             "start at batch 1")
        previous = last


class ModeSettings(BaseModel):
    """One decoding mode. Keys other than those below go into vLLM's
    ``speculative_config`` unchanged (``prompt_lookup_max``, ``draft_tensor_parallel_size``...)."""

    model_config = ConfigDict(extra="allow")

    method: str | None = Field(None, description="vLLM speculative method; absent = plain decoding")
    model: str | None = Field(None, description="drafter path; 'embedded:eagle3' etc. for the "
                                                "embedded default's drafters")
    num_speculative_tokens: int | None = Field(None, ge=1, le=64, description="draft tokens "
                                               "per step (K); required with 'method'")
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = Field(
        None, min_length=1, max_length=256, description="vLLM's per-batch K table: "
        "[first batch, last batch, K] ranges from batch 1, K = 0 allowed; a gap or the "
        "tail keeps the K of the range before; the policy prices the engine at the K "
        "its table gives for the batch")
    kv_cache_gib: float | None = Field(None, gt=0, description="KV cache for this engine")
    cpu_threads_bind: str | None = Field(None, description="CPU build: cores for this engine")
    url: str | None = Field(None, pattern=r"^https?://", description="serve this mode with an "
                            "existing vLLM OpenAI server at this URL instead of in-process")
    served_model: str | None = Field(None, description="the remote server's model name; "
                                                       "absent = the first it lists")
    gpu_group: str | None = Field(None, min_length=1, max_length=64,
                                  description="engines with the same group share one device; "
                                              "absent = one shared GPU, or on the CPU build "
                                              "one group 'cpu' for every in-process engine")

    @model_validator(mode="after")
    def _speculative_needs_method(self) -> ModeSettings:
        if self.method is None and (self.model or self.num_speculative_tokens or self.model_extra
                                    or self.num_speculative_tokens_per_batch_size):
            raise ValueError("a speculative mode needs 'method' (eagle3, dflash, ngram, ...)")
        if self.method is not None and self.num_speculative_tokens is None:
            raise ValueError(f"method {self.method!r} needs 'num_speculative_tokens'")
        if self.num_speculative_tokens_per_batch_size is not None:
            _check_k_table(self.num_speculative_tokens_per_batch_size)
        return self

    def k_schedule(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(sorted(self.num_speculative_tokens_per_batch_size or ()))

    def speculative_config(self) -> dict[str, Any] | None:
        if self.method is None:
            return None
        config: dict[str, Any] = {"method": self.method,
                                  "num_speculative_tokens": self.num_speculative_tokens}
        if self.model is not None:
            config["model"] = self.model
        if self.num_speculative_tokens_per_batch_size is not None:
            config["num_speculative_tokens_per_batch_size"] = [
                list(r) for r in self.k_schedule()]
        config.update(self.model_extra or {})
        return config


class RuleParams(BaseModel):
    """The published static rule's thresholds (``policy.name: rule``)."""

    model_config = ConfigDict(extra="forbid")

    max_batch_for_speculation: int = Field(32, ge=0, description="plain decoding when the "
                                           "drafter's engine runs a larger batch")
    min_tokens_for_speculation: int = Field(50, ge=0, description="plain decoding for a "
                                            "request whose max_tokens is below this")
    dflash_min_acceptance: float = Field(0.7, ge=0.0, le=1.0, description="DFlash while its "
                                         "measured acceptance rate is above this, else "
                                         "EAGLE-3")


class PolicySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Literal["adaptive", "rule"] = Field(
        "adaptive", description="the auto policy: 'adaptive' prices every mode from live "
        "load and measured acceptance; 'rule' is the published static rule")
    rule: RuleParams = RuleParams()
    # Initial live settings; once the shared store holds settings (PUT
    # /admin/policy), those win on every replica.
    adaptive: AdaptiveSettings = AdaptiveSettings()


def embedded_default_modes() -> dict[str, ModeSettings]:
    """The CPU demo set: plain, prompt lookup, and the project's own drafters."""
    return {
        "standard": ModeSettings(),
        "ngram": ModeSettings(method="ngram", num_speculative_tokens=4,
                              prompt_lookup_max=4, prompt_lookup_min=2),
        "eagle3": ModeSettings(method="eagle3", model=f"{EMBEDDED_DRAFTER_PREFIX}eagle3",
                               num_speculative_tokens=3),
        "dflash": ModeSettings(method="dflash", model=f"{EMBEDDED_DRAFTER_PREFIX}dflash",
                               num_speculative_tokens=4),
    }


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECGATE_", env_nested_delimiter="__",
                                      extra="forbid", validate_default=True)

    config: Path | None = Field(None, description="YAML config file")
    host: str = Field("127.0.0.1", description="address the HTTP server binds")
    port: int = Field(8000, ge=1, le=65535, description="port the HTTP server listens on")
    model: str | None = Field(None, description="model directory; absent = embedded "
                                                "SmolLM2-135M-Instruct")
    served_model_name: str | None = Field(None, description="the model name clients send "
                                          "and /v1/models lists; absent = the model's own")
    chat_template: Path | None = Field(None, description="a Jinja chat template file used "
                                       "instead of the model's own (e.g. one that renders "
                                       "tools); absent = the model's own")
    tool_call_parser: str | None = Field(
        None, min_length=1, max_length=64, description="vLLM's tool-call parser that reads "
        "tool calls out of generated text (vLLM's --tool-call-parser names); absent = "
        "'hermes' for the embedded model, none for a model of your own; 'none' = no tools "
        "(requests with tools get 400)")
    cache_dir: Path = Field(Path.home() / ".cache" / "specgate",
                            description="where the embedded model and drafters are prepared")
    modes: dict[str, ModeSettings] | None = Field(
        None, description="decoding modes; absent = the embedded default set, or "
                          "'standard' only for a model of your own")
    kv_cache_gib: float = Field(0.25, gt=0,
                                description="KV cache per engine unless the mode sets it")
    max_model_len: int = Field(2048, ge=16, description="longest prompt + output, in "
                               "tokens, each engine accepts")
    dtype: DType | None = Field(
        None, description="weights/activations dtype; absent = float32 for the embedded "
                          "model (greedy output then does not depend on batch shape on CPU), "
                          "'auto' (the checkpoint's own) otherwise")
    enforce_eager: bool = Field(True, description="vLLM's enforce_eager: no CUDA graphs "
                                "(faster start; the CPU build needs it)")
    max_n: int = Field(8, ge=1, le=128, description="largest 'n' a request may ask for")
    policy: PolicySettings = PolicySettings()
    redis_url: str | None = Field(None, description="shared policy store; absent = in-memory")
    redis_prefix: str = Field("specgate", min_length=1, max_length=64,
                              pattern=r"^[A-Za-z0-9_.:-]+$", description="prefix of every "
                              "key in the shared store; gateways that share it share state")
    redis_timeout_s: float = Field(0.25, gt=0.0, le=10.0,
                                   description="bound on every policy-store call")
    admin_key: SecretStr | None = Field(None, description="Bearer key for /admin/*; "
                                                          "absent = admin API disabled")
    # NoDecode: the environment may give a comma-separated list, not only JSON.
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Bearer keys accepted on /v1/*; none here and no "
                                          "api_keys_file = /v1/* needs no key")
    api_keys_file: Path | None = Field(None, description="file of API keys, one per line, "
                                                         "'#' comments; must hold at least one")
    public_endpoints: Annotated[list[OperationalEndpoint], NoDecode] = Field(
        default_factory=lambda: list(OPERATIONAL_ENDPOINTS),
        description="which of /health, /ready, /metrics answer without an API key")
    max_body_bytes: int = Field(4 * MIB, ge=1024, le=1024 * MIB,
                                description="largest request body; larger ones get 413")
    max_in_flight_per_mode: int = Field(256, ge=0, description="admitted, unfinished requests "
                                        "per mode before 429; 0 = no bound")
    max_in_flight: int = Field(1024, ge=0, description="admitted, unfinished requests in "
                                                       "total before 429; 0 = no bound")
    request_timeout_s: float = Field(600.0, ge=0.0, description="a request's whole life, "
                                     "arrival to last token; 0 = no limit")
    sse_keepalive_s: float = Field(15.0, ge=0.0, description="a stream silent this long gets "
                                   "a ': keep-alive' comment; 0 = never")
    idle_connection_timeout_s: int = Field(
        75, ge=1, le=3600, description="an idle keep-alive connection is closed after this "
        "long; longer than clients' pool expiry (5 s in httpx and the openai SDK), so that a "
        "client never sends a request on a connection the server is closing")
    engine_start_timeout_s: float = Field(
        1800.0, ge=0.0, description="an engine not started after this long is stopped and "
        "reported failed (/ready says which); a restart is retried with backoff; 0 = no bound")
    drain_timeout_s: float = Field(30.0, ge=0.0, description="on shutdown, how long admitted "
                                   "requests may take to finish before they are ended")
    move_in_flight: bool = Field(True, description="when auto switches a device group to "
                                 "another mode, continue its requests in flight on the new "
                                 "engine from their text (docs/policy.md, 'Moves')")
    move_min_remaining_tokens: int = Field(32, ge=1, description="a request with fewer "
                                           "tokens left to generate finishes where it is")
    engine_fault_hold_s: float = Field(
        600.0, ge=0.0, description="when an engine dies serving requests, requests with "
        "the same sampling fields are kept off it this long (routed elsewhere, or a 400 "
        "when forced); 0 = never")
    max_failovers: int = Field(
        2, ge=0, description="when an engine dies, each request it was serving continues on "
        "another engine, at most this many times per request (docs/api.md, 'When an engine "
        "dies'); 0 = such requests fail with it")
    burst_window_s: float = Field(
        0.005, ge=0.0, le=0.2, description="an auto request waits until no other request "
        "has arrived for this long (at most five times as long) before its mode is chosen, "
        "so that requests arriving together are priced at the batch they make together "
        "(docs/policy.md, 'Bursts'); 0 = decide at once")
    replica_id: str | None = Field(None, description="this replica's name in the shared "
                                                     "store; absent = host-pid")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="the gateway's log level")

    @field_validator("modes")
    @classmethod
    def _mode_names(cls, modes: dict[str, ModeSettings] | None) -> dict[str, ModeSettings] | None:
        if modes is None:
            return None
        if not modes:
            raise ValueError("configure at least one mode")
        for name in modes:
            if name == AUTO or not _MODE_NAME.match(name):
                raise ValueError(f"mode name {name!r} must match {_MODE_NAME.pattern} "
                                 f"and not be {AUTO!r}")
        return modes

    @field_validator("chat_template")
    @classmethod
    def _template_readable(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"chat_template: no such file: {path}")
        return path

    @field_validator("api_keys", "public_endpoints", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("api_keys")
    @classmethod
    def _key_format(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for key in keys:  # checked as SecretStr: a failing key never reaches an error message
            check_key(key.get_secret_value())
        return keys

    @field_validator("api_keys_file")
    @classmethod
    def _key_file_readable(cls, path: Path | None) -> Path | None:
        if path is not None:
            read_key_file(path)
        return path

    @model_validator(mode="after")
    def _protected_needs_keys(self) -> Settings:
        protected = sorted(set(OPERATIONAL_ENDPOINTS) - set(self.public_endpoints))
        if protected and not self.api_keys and self.api_keys_file is None:
            raise ValueError(f"public_endpoints leaves {', '.join(protected)} protected, but no "
                             f"api_keys or api_keys_file is configured to protect them with")
        return self

    def resolved_api_keys(self) -> list[str]:
        """Every accepted ``/v1/*`` key: ``api_keys`` and the file's; empty = no auth."""
        keys = [k.get_secret_value() for k in self.api_keys]
        if self.api_keys_file is not None:
            keys.extend(read_key_file(self.api_keys_file))
        return keys

    def resolved_tool_call_parser(self) -> str | None:
        if self.tool_call_parser == "none":
            return None
        if self.tool_call_parser is None:
            return "hermes" if self.model is None else None
        return self.tool_call_parser

    def resolved_dtype(self) -> DType:
        if self.dtype is not None:
            return self.dtype
        return "float32" if self.model is None else "auto"

    def resolved_modes(self) -> dict[str, ModeSettings]:
        if self.modes is not None:
            return self.modes
        return embedded_default_modes() if self.model is None else {"standard": ModeSettings()}

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        init_kwargs: dict[str, Any] = getattr(init_settings, "init_kwargs", {})
        config_file = init_kwargs.get("config") or os.environ.get("SPECGATE_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"config file not found: {path}")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

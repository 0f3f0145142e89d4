"""What SpecGate does with every request field vLLM's OpenAI server accepts.

The one table of it: the wire models refuse what it refuses (with its reason),
``tests/gateway/test_vllm_fields.py`` checks it against the installed vLLM's
request models (a field vLLM adds fails that test until it is entered here),
and ``docs/api-fields.md`` is rendered from it (``python -m gateway.fields``).

A refused field is still accepted when its value asks for nothing (absent,
``null``, or vLLM's own default such as ``"echo": false``), as clients and
SDKs often send defaults explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic_core import PydanticCustomError

Endpoint = Literal["chat", "completions"]
BOTH: tuple[Endpoint, ...] = ("chat", "completions")
CHAT: tuple[Endpoint, ...] = ("chat",)
COMPLETIONS: tuple[Endpoint, ...] = ("completions",)
UNSUPPORTED = "unsupported_parameter"


class Handling(StrEnum):
    ENGINE = "passed to the engine"
    GATEWAY = "applied by the gateway"
    IGNORED = "accepted, no effect"
    REFUSED = "refused (400)"


@dataclass(frozen=True, slots=True)
class FieldRule:
    handling: Handling
    meaning: str                       # what it does here, or why it is refused
    endpoints: tuple[Endpoint, ...] = BOTH
    neutral: tuple[object, ...] = ()   # refused fields: values that ask for nothing
    vllm: bool = True                  # False: an OpenAI field vLLM's models do not declare


def _engine(meaning: str, endpoints: tuple[Endpoint, ...] = BOTH) -> FieldRule:
    return FieldRule(Handling.ENGINE, meaning, endpoints)


def _gateway(meaning: str, endpoints: tuple[Endpoint, ...] = BOTH, *,
             vllm: bool = True) -> FieldRule:
    return FieldRule(Handling.GATEWAY, meaning, endpoints, vllm=vllm)


def _ignored(meaning: str, endpoints: tuple[Endpoint, ...] = BOTH, *,
             vllm: bool = True) -> FieldRule:
    return FieldRule(Handling.IGNORED, meaning, endpoints, vllm=vllm)


def _refused(reason: str, *neutral: object, endpoints: tuple[Endpoint, ...] = BOTH,
             vllm: bool = True) -> FieldRule:
    return FieldRule(Handling.REFUSED, reason, endpoints, neutral, vllm)


_TEXT_ONLY = "the served model is text-only"
_LEGACY_FUNCTIONS = ("OpenAI's deprecated form of tools (vLLM does not take it either); send "
                     "'tools' and 'tool_choice'")
_NO_STRUCTURED = ("structured output (guided decoding) is not offered by this gateway: "
                  "its engines run with no output constraints")

FIELDS: Mapping[str, FieldRule] = {
    # -- the prompt and the model ---------------------------------------------------
    "model": _gateway("must name the served model (404 otherwise)"),
    "messages": _gateway("rendered by the model's chat template; text content only; "
                         "assistant 'tool_calls' and 'tool' results included", CHAT),
    "prompt": _gateway("one prompt, text or token ids (batched prompts are refused)",
                       COMPLETIONS),
    "suffix": _refused("fill-in-the-middle is not supported: the gateway renders prompts "
                       "itself and has no FIM template", None, endpoints=COMPLETIONS),
    "prompt_embeds": _refused("prompt embeddings are not accepted; send text or token ids",
                              None, endpoints=COMPLETIONS),
    "echo": _refused("responses carry generated text only (the prompt is not echoed)",
                     False, None),
    "add_generation_prompt": _gateway("passed to the chat template", CHAT),
    "continue_final_message": _gateway("passed to the chat template (the reply continues "
                                       "the last assistant message)", CHAT),
    "documents": _gateway("passed to the chat template", CHAT),
    "chat_template_kwargs": _gateway("passed to the chat template (names the template call "
                                     "itself takes are refused)", CHAT),
    "reasoning_effort": _gateway("passed to the chat template, with enable_thinking, as "
                                 "vLLM does", CHAT),
    "chat_template": _refused("a caller's own chat template is not run (vLLM refuses it too "
                              "unless started with --trust-request-chat-template)", None,
                              endpoints=CHAT),
    "add_special_tokens": _gateway("whether the tokenizer adds special tokens (BOS) to the "
                                   "prompt; vLLM's defaults: false for chat, true for "
                                   "completions"),
    "truncate_prompt_tokens": _gateway("keep only this many prompt tokens (-1: the context "
                                       "length less one)"),
    "truncation_side": _gateway("'left' (default) keeps the last tokens, 'right' the first"),
    "media_io_kwargs": _refused(_TEXT_ONLY, None, endpoints=CHAT),
    "mm_processor_kwargs": _refused(_TEXT_ONLY, None, endpoints=CHAT),
    "mm_payload": _ignored("vLLM reads it only on its /render endpoints", BOTH),
    "return_mm_kwargs": _ignored("vLLM reads it only on its /render endpoints", BOTH),
    "cache_salt": _engine("salts the engine's prefix cache for this request"),
    # -- sampling ----------------------------------------------------------------------
    "max_tokens": _engine("output length bound (prompt + max_tokens must fit the context)"),
    "max_completion_tokens": _engine("output length bound; wins over max_tokens", CHAT),
    "temperature": _engine("sampling temperature, 0 to 2"),
    "top_p": _engine("nucleus sampling, (0, 1]"),
    "top_k": _engine("top-k sampling; 0 or -1 disables"),
    "min_p": _engine("min-p sampling, 0 to 1"),
    "seed": _engine("per-request sampling seed"),
    "n": _engine("number of choices (at most the gateway's max_n)"),
    "stop": _engine("up to 4 stop strings"),
    "stop_token_ids": _engine("token ids that end a choice"),
    "include_stop_str_in_output": _engine("keep the matched stop string in the text"),
    "ignore_eos": _engine("keep generating past the end-of-sequence token"),
    "min_tokens": _engine("tokens generated before EOS or stop may end a choice"),
    "presence_penalty": _engine("-2 to 2"),
    "frequency_penalty": _engine("-2 to 2"),
    "repetition_penalty": _engine("> 0; 1 is neutral"),
    "logit_bias": _engine("token id (as a string) -> bias, -100 to 100"),
    "allowed_token_ids": _engine("only these token ids may be sampled"),
    "bad_words": _engine("words that may not be generated"),
    "skip_special_tokens": _engine("drop special tokens from the text"),
    "spaces_between_special_tokens": _engine("detokenization spacing"),
    "logprobs": _engine("chat: true/false; completions: 0 to 20 top alternatives"),
    "top_logprobs": _engine("0 to 20 top alternatives per token (needs logprobs)", CHAT),
    "prompt_logprobs": _refused("prompt logprobs are not returned by this gateway", None),
    "logprob_token_ids": _refused("logprobs of chosen token ids are not returned by this "
                                  "gateway", None),
    "return_tokens_as_token_ids": _refused("logprob tokens are always returned as text here",
                                           None, False),
    "use_beam_search": _refused("beam search is not supported: it cannot run on the "
                                "speculative-decoding engines this gateway routes between",
                                False),
    "length_penalty": _ignored("vLLM uses it only in beam search, which is refused"),
    "watermarking": _ignored("no watermark is configured on the engines"),
    "repetition_detection": _refused("output repetition detection is not forwarded to the "
                                     "engines by this gateway", None),
    "thinking_token_budget": _refused("no reasoning parser is configured, so a thinking "
                                      "budget cannot apply", None),
    "structured_outputs": _engine("one output constraint (json, regex, choice, grammar, "
                                  "json_object) with its options, on every mode; "
                                  "structural_tag is refused"),
    "response_format": _engine("text, json_object or json_schema (the output matches the "
                               "schema), on every mode; sets the constraint's kind over "
                               "structured_outputs, as in vLLM"),
    "vllm_xargs": _refused("no custom logits processors or extensions are installed on the "
                           "engines", None),
    # -- tools and reasoning -----------------------------------------------------------
    "tools": _gateway("functions offered to the model through its chat template; its calls "
                      "come back as 'tool_calls', read by vLLM's tool-call parser "
                      "(tool_call_parser; without one, a 400)", CHAT),
    "tool_choice": _gateway("none, auto (the default with tools: the parser reads free "
                            "text), required or a named function (the output is "
                            "constrained to vLLM's JSON schema for them, on every mode)",
                            CHAT),
    "parallel_tool_calls": _gateway("false: tool_choice required returns at most one call "
                                    "(vLLM's maxItems 1); auto is not limited", CHAT),
    "include_reasoning": _ignored("no reasoning parser is configured: replies carry no "
                                  "separate reasoning", CHAT),
    # -- streaming and the response ----------------------------------------------------
    "stream": _gateway("server-sent events ending in [DONE]"),
    "stream_options": _gateway("include_usage: a final usage chunk; continuous_usage_stats "
                               "(with include_usage): usage on every chunk"),
    "stream_interval": _refused("streams send every engine step; batching tokens per chunk "
                                "is not supported", None, 1),
    "return_token_ids": _refused("token ids are not returned by this gateway", None, False),
    "return_prompt_text": _refused("the rendered prompt is not returned by this gateway",
                                   None, False, endpoints=CHAT),
    "return_token_offsets": _ignored("vLLM reads it only on its /render endpoints"),
    "routed_experts_prompt_start": _ignored("routed-expert data is not returned"),
    # -- scheduling and identity -------------------------------------------------------
    "request_id": _refused("the gateway assigns request ids (returned in x-request-id)",
                           None),
    "session_id": _ignored("accepted for compatibility; one gateway keeps no sessions"),
    "priority": _refused("the engines schedule first come, first served (no priority "
                         "scheduling)", 0, None),
    "kv_transfer_params": _refused("disaggregated prefill/decode is not configured", None),
    "ec_transfer_params": _refused("disaggregated encoding is not configured", None),
    "user": _ignored("end-user id; not used (as in vLLM)"),
    # -- OpenAI fields vLLM's models do not declare (it ignores them) ------------------
    "metadata": _gateway("string map; metadata.workload_class names the workload class",
                         vllm=False),
    "store": _ignored("nothing is stored", CHAT, vllm=False),
    "service_tier": _ignored("one service tier here", CHAT, vllm=False),
    "prompt_cache_key": _ignored("the engines' prefix cache needs no key", CHAT, vllm=False),
    "safety_identifier": _ignored("not used", CHAT, vllm=False),
    "verbosity": _ignored("the served model takes no verbosity setting", CHAT, vllm=False),
    "modalities": _gateway("only [\"text\"]", CHAT, vllm=False),
    "best_of": _gateway("must equal n (no server-side best-of)", COMPLETIONS, vllm=False),
    "functions": _refused(_LEGACY_FUNCTIONS, None, endpoints=CHAT, vllm=False),
    "function_call": _refused(_LEGACY_FUNCTIONS, None, "none", endpoints=CHAT, vllm=False),
    "audio": _refused(_TEXT_ONLY, None, endpoints=CHAT, vllm=False),
    "prediction": _refused("predicted outputs are not supported", None, endpoints=CHAT,
                           vllm=False),
    "web_search_options": _refused("no web search here", None, endpoints=CHAT, vllm=False),
}

# Fields of ``stream_options``.
STREAM_OPTIONS: Mapping[str, FieldRule] = {
    "include_usage": _gateway("a last chunk with the request's usage"),
    "continuous_usage_stats": _gateway("with include_usage: usage so far on every chunk"),
    "include_obfuscation": _ignored("nothing is obfuscated", vllm=False),
}


def refused(endpoint: Endpoint) -> dict[str, FieldRule]:
    return {name: rule for name, rule in FIELDS.items()
            if rule.handling is Handling.REFUSED and endpoint in rule.endpoints}


def _is_neutral(value: object, neutral: tuple[object, ...]) -> bool:
    # By type too: 0 == False in Python, but "priority": false is not a priority.
    return value is None or any(type(value) is type(n) and value == n for n in neutral)


def drop_refused(data: Any, endpoint: Endpoint) -> Any:
    """The body without refused fields that ask for nothing; raises for one that asks.

    Runs before validation (``mode="before"``), so ``data`` is the raw JSON value.
    """
    return drop_refused_by(data, refused(endpoint))


def drop_refused_by(data: Any, rules: Mapping[str, FieldRule]) -> Any:
    """``drop_refused`` with the refused fields given (an endpoint with its own table)."""
    if not isinstance(data, dict):
        return data
    present = [name for name in data if isinstance(name, str) and name in rules]
    if not present:
        return data
    for name in present:
        if not _is_neutral(data[name], rules[name].neutral):
            raise PydanticCustomError(UNSUPPORTED, "'{param}' is not supported here: {reason}",
                                      {"param": name, "reason": rules[name].meaning})
    return {k: v for k, v in data.items() if k not in present}


def markdown_table() -> str:
    """The table of docs/api-fields.md."""
    lines = ["| field | endpoints | SpecGate | what it does here |", "|---|---|---|---|"]
    for name in sorted(FIELDS):
        rule = FIELDS[name]
        where = " + ".join(rule.endpoints) + ("" if rule.vllm else " (OpenAI; not in vLLM)")
        meaning = rule.meaning.replace("|", "\\|")
        lines.append(f"| `{name}` | {where} | {rule.handling.value} | {meaning} |")
    for name in sorted(STREAM_OPTIONS):
        rule = STREAM_OPTIONS[name]
        where = "chat + completions" + ("" if rule.vllm else " (OpenAI; not in vLLM)")
        lines.append(f"| `stream_options.{name}` | {where} | {rule.handling.value} | "
                     f"{rule.meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

"""LiteLLM, unchanged, against SpecGate (its OpenAI-compatible provider): a plain
completion, a streamed one, and one with a required tool. Exits non-zero on any error."""

from __future__ import annotations

import json
from typing import Any

import litellm
from _target import check, target

WEATHER: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def main() -> None:
    base, model = target()
    common: dict[str, Any] = {"model": f"openai/{model}", "api_base": base,
                              "api_key": "unused", "temperature": 0, "max_tokens": 120}
    plain: Any = litellm.completion(messages=[{"role": "user", "content": "Say hello."}],
                                    **common)
    text = plain.choices[0].message.content
    print(f"completion: {text!r}, usage {plain.usage.total_tokens} tokens")
    check(isinstance(text, str) and plain.usage.completion_tokens > 0, "a plain reply")
    chunks = list(litellm.completion(messages=[{"role": "user", "content": "Count."}],
                                     stream=True, **common))
    print(f"stream: {len(chunks)} chunks")
    check(len(chunks) > 1, "streamed in chunks")
    tooled: Any = litellm.completion(messages=ASK, tools=[WEATHER], tool_choice="required",
                                     parallel_tool_calls=False, **common)
    calls = tooled.choices[0].message.tool_calls or []
    print(f"tools: {[(c.function.name, c.function.arguments) for c in calls]!r}, "
          f"finish {tooled.choices[0].finish_reason!r}")
    check(len(calls) == 1 and calls[0].function.name == "get_weather", "one get_weather call")
    check(isinstance(json.loads(calls[0].function.arguments).get("city"), str),
          "its arguments parse")
    print("litellm: ok")


if __name__ == "__main__":
    main()

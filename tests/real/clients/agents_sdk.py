"""The OpenAI Agents SDK, unchanged, against SpecGate: an agent with one function tool,
run through the Responses API (the SDK's default) and through chat completions,
plainly and streamed. A small model decides little, so ``tool_choice`` is required
on every turn and the run ends after the second call: the second request carries
the first call and its output back (function_call / function_call_output items, or
chat's tool turns). Exits non-zero on any error."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from _target import check, target
from agents import (
    Agent,
    FunctionToolResult,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    ToolsToFinalOutputResult,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import Field


def weather_agent(model: Any, calls: list[str]) -> Agent[Any]:
    """An agent whose tool records each call in ``calls``; the second call ends the run."""

    @function_tool
    def get_weather(city: Annotated[str, Field(max_length=24)]) -> str:
        """The weather in a city now."""
        calls.append(city)
        return f"18C and sunny in {city}"

    def second_call_ends_the_run(_: RunContextWrapper[Any],
                                 results: list[FunctionToolResult]) -> ToolsToFinalOutputResult:
        done = len(calls) == 2
        return ToolsToFinalOutputResult(is_final_output=done,
                                        final_output=results[-1].output if done else None)

    return Agent(name="weather", instructions="Answer with the weather tool.",
                 tools=[get_weather], model=model,
                 # One call a turn, bounded strings: greedy decoding cannot run on.
                 model_settings=ModelSettings(tool_choice="required", max_tokens=120,
                                              temperature=0.0, parallel_tool_calls=False),
                 reset_tool_choice=False, tool_use_behavior=second_call_ends_the_run)


async def run(api: Literal["responses", "chat_completions"], model: Any,
              streamed: bool) -> None:
    set_default_openai_api(api)
    calls: list[str] = []
    agent = weather_agent(model, calls)
    if streamed:
        result: Any = Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=3)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=3)
    print(f"{api} streamed={streamed}: tool called with {calls!r}, "
          f"final output {result.final_output!r}")
    check(len(calls) == 2, f"{api}: the tool was called twice")
    check(str(result.final_output).startswith("18C and sunny in"), f"{api}: tool output")
    items = [i.type for i in result.new_items]
    check(items == ["tool_call_item", "tool_call_output_item"] * 2, f"{api}: items {items}")
    raw = result.new_items[0].raw_item
    arguments = raw.arguments if hasattr(raw, "arguments") else raw["arguments"]
    check(isinstance(json.loads(arguments), dict), f"{api}: arguments are a JSON object")


async def main() -> None:
    base, model = target()
    client = AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
    set_tracing_disabled(True)
    set_default_openai_client(client, use_for_tracing=False)
    for streamed in (False, True):
        await run("responses", model, streamed)
        await run("chat_completions", OpenAIChatCompletionsModel(model=model,
                                                                 openai_client=client),
                  streamed)
    await client.close()
    print("agents sdk: ok")


if __name__ == "__main__":
    asyncio.run(main())

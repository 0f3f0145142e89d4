"""LangChain's ChatOpenAI, unchanged, against SpecGate: ``bind_tools`` with a forced
tool gives a tool call with parsed arguments, and ``with_structured_output`` (a JSON
schema, LangChain's default) gives the pydantic object. Exits non-zero on any error."""

from __future__ import annotations

from _target import check, target
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ConfigDict, Field


class GetWeather(BaseModel):
    """The weather in a city now."""

    # No other keys, bounded strings: a small greedy model cannot run on.
    model_config = ConfigDict(extra="forbid")
    city: str = Field(max_length=24, description="The city")


class City(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=24)
    country: str = Field(max_length=24)


def main() -> None:
    base, model = target()
    llm = ChatOpenAI(base_url=base, api_key="unused", model=model,  # type: ignore[arg-type]
                     temperature=0, max_tokens=120, max_retries=0)
    for choice in ("GetWeather", "any"):  # named, and required ("any" in LangChain)
        tooled = llm.bind_tools([GetWeather], tool_choice=choice, parallel_tool_calls=False)
        message = tooled.invoke("What is the weather in Paris?")
        print(f"bind_tools(tool_choice={choice!r}): {message.tool_calls!r}")
        check(len(message.tool_calls) == 1, f"{choice}: one tool call")
        call = message.tool_calls[0]
        check(call["name"] == "GetWeather", f"{choice}: the tool's name")
        check(isinstance(call["args"].get("city"), str), f"{choice}: parsed arguments")
        check(bool(call["id"]), f"{choice}: a call id")
    structured = llm.with_structured_output(City)
    city = structured.invoke("Name a city in France.")
    print(f"with_structured_output(City): {city!r}")
    check(isinstance(city, City), "a City object")
    streamed = [chunk.content for chunk in llm.stream("Say hello.")]
    print(f"stream: {''.join(str(c) for c in streamed)!r}")
    check(len(streamed) > 1, "streamed in chunks")
    print("langchain: ok")


if __name__ == "__main__":
    main()

"""Unlabelled requests are learned under a class their own features give."""

from __future__ import annotations

from engines.request import GenerationRequest, SamplingOptions, StructuredOutput
from service.request_class import feature_class, request_class
from tests.fakes.engine import FakeTokenizer

TOK = FakeTokenizer()     # one token per character


def req(text: str, structured: StructuredOutput | None = None) -> GenerationRequest:
    return GenerationRequest("r", tuple(TOK.encode(text)),
                             SamplingOptions(max_tokens=8, structured=structured))


def test_the_prompt_tells_code_copy_and_free_text_apart() -> None:
    assert feature_class(TOK.encode("Write a Python function that adds two numbers."),
                         TOK) == "auto:code:s"
    passage = "The committee met on Tuesday to review the budget for the new library " * 2
    assert feature_class(TOK.encode(f"Repeat the following text word for word.\n\n{passage}"),
                         TOK) == "auto:copy:m"
    assert feature_class(TOK.encode("Write a poem about autumn."), TOK) == "auto:text:s"
    # A long context is drawn on by the answer, whatever the instruction.
    assert feature_class(TOK.encode("Tell me a story. " * 40), TOK) == "auto:copy:l"
    assert feature_class(TOK.encode("Once upon a time"), TOK, raw_prompt=True) == \
        "auto:text:s:raw"


def test_a_label_wins_and_constrained_output_is_learned_apart() -> None:
    assert request_class("chat", req("Write a Python function."), TOK) == "chat"
    schema = StructuredOutput("json", "{}")
    assert request_class(None, req("Write a Python function.", schema), TOK) == "json"
    assert request_class("chat", req("x", schema), TOK) == "chat:json"
    assert request_class(None, req("x", StructuredOutput("regex", "a+")), TOK) == "constrained"

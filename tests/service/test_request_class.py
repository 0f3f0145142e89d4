"""Unlabelled requests are learned under a class their own features give."""

from __future__ import annotations

from engines.request import GenerationRequest, SamplingOptions, StructuredOutput
from service.request_class import Asked, feature_class, request_class
from tests.fakes.engine import FakeTokenizer

TOK = FakeTokenizer()     # one token per character: s < 96 characters, m < 512


def req(text: str, structured: StructuredOutput | None = None) -> GenerationRequest:
    return GenerationRequest("r", tuple(TOK.encode(text)),
                             SamplingOptions(max_tokens=8, structured=structured))


ROUTINE = ("func total(items []Item) float64 {\n\tsum := 0.0\n\tfor _, it := range items {\n"
           "\t\tsum += it.Price * float64(it.Qty)\n\t}\n\treturn sum\n}")
MEMO = ("From Monday the north entrance is closed for repairs until the end of April, so "
        "please use the side door on Elm Street. Parking on level two is reserved for "
        "visitors, and the canteen opens at eight instead of half past seven.")


def test_the_prompts_shape_tells_code_material_follow_ups_and_free_text_apart() -> None:
    """No word of the prompt enters: code by its symbols, material by its paragraphs,
    a follow-up by the conversation, in any wording."""
    def shape(text: str, turns: int = 0) -> str:
        return feature_class(TOK.encode(text), TOK, asked=Asked(text, earlier_turns=turns))

    assert shape(f"Zmień tę funkcję.\n\n{ROUTINE}") == "auto:code:m"
    assert shape(f"Was sagt dieser Text?\n\n{MEMO}") == "auto:doc:m"
    assert shape(MEMO + " " + MEMO) == "auto:doc:m"           # one long paragraph
    assert shape("Now the same, in reverse order.", turns=1) == "auto:turns:s"
    assert shape("Write a poem about autumn.") == "auto:text:s"
    # An instruction of some length is not material; words like "code" or "repeat"
    # change nothing.
    assert shape("Write the code of a function that repeats a word as many times as its "
                 "second argument says, and test it.") == "auto:text:m"
    # A long context is drawn on by the answer, whatever the instruction.
    assert shape("Tell me a story. " * 40) == "auto:doc:l"
    assert feature_class(TOK.encode("Once upon a time"), TOK, raw_prompt=True) == \
        "auto:text:s:raw"


def test_without_the_message_the_prompt_is_read_as_it_is() -> None:
    prompt = TOK.encode(f"Summarise this.\n\n{MEMO}")
    assert feature_class(prompt, TOK) == "auto:doc:m"


def test_a_label_wins_and_constrained_output_is_learned_apart() -> None:
    assert request_class("chat", req("Write a Python function."), TOK) == "chat"
    schema = StructuredOutput("json", "{}")
    assert request_class(None, req("Write a Python function.", schema), TOK) == "json"
    assert request_class("chat", req("x", schema), TOK) == "chat:json"
    assert request_class(None, req("x", StructuredOutput("regex", "a+")), TOK) == "constrained"

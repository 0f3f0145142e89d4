"""The workload class a request is learned under, from what the request itself shows.

The policy learns acceptance and answer length per workload class. Callers rarely
label their traffic, and one pooled class cannot tell a prompt whose answer reuses
text it carries (where prompt lookup drafts well) from code (where a trained drafter
does) or from free chat. So an unlabelled request gets a class from the shape of
its prompt, with no word lists: what a prompt says in any language or wording does
not enter, only how it is built.

- **code**: the prompt carries code-like text (lines dense in brackets, operators
  and other symbols that prose seldom uses);
- **turns**: the conversation has earlier assistant turns (a follow-up, whose answer
  often reuses an earlier one);
- **doc**: the message answered carries material besides its instruction (a second
  paragraph of some length, or one long paragraph), or the prompt is long enough
  that answers quote it;
- **text** otherwise.

Then the prompt's length (``s`` < 96 tokens, ``m`` < 512, ``l``) and its endpoint
(raw ``/v1/completions`` prompts continue text rather than answer). The buckets are
the features; what each bucket accepts on each mode is the prediction, learned
online from finished requests like any class (prompt lookup's on every finished
answer, replayed). A caller's label stays a hint that wins. Constrained output
drafts unlike free text whatever the prompt (keys, braces and enum values are
near-certain), so a constrained request is learned as ``json`` (or
``<label>:json``; ``constrained`` for the other kinds of constraint).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engines.request import GenerationRequest
from engines.tokenizer import Tokenizer

# Enough of the prompt to see the instruction and the passage it carries.
TAIL_TOKENS = 768
TAIL_CHARS = 3000
# Characters code is dense in and prose seldom uses (no sentence punctuation).
SYMBOLS = frozenset("{}[]()<>=;_*&|\\/#$%^~`+")
CODE_SHARE = 0.04         # of the visible characters, at least
CODE_LINES = 3            # lines with two or more symbols, at least
# Material the answer may draw on: a paragraph this long beside another one (the
# instruction), or one this long on its own.
BESIDE_CHARS = 100
ALONE_CHARS = 300
LONG_PROMPT = 512         # tokens: a context long enough that answers quote it
_PARAGRAPH = re.compile(r"\n\s*\n")


@dataclass(frozen=True, slots=True)
class Asked:
    """What the endpoint knows of the conversation: the text of the message answered
    (None: read the prompt as it is, e.g. a raw completion), the text of the messages
    before it, and how many of those were assistant turns. Read from the messages, not
    the rendered prompt, so that a chat template's markup does not count as code."""

    text: str | None = None
    before: str = ""
    earlier_turns: int = 0


@dataclass(frozen=True, slots=True)
class PromptShape:
    """What the classifier reads from a prompt."""

    tokens: int
    symbol_share: float     # of the visible characters
    symbol_lines: int       # lines with two or more symbols
    paragraphs: int         # of the message answered
    longest_paragraph: int  # characters
    earlier_turns: int      # assistant turns before the one asked for

    @property
    def kind(self) -> str:
        if self.symbol_share >= CODE_SHARE and self.symbol_lines >= CODE_LINES:
            return "code"
        if self.earlier_turns:
            return "turns"
        if (self.longest_paragraph >= ALONE_CHARS or self.tokens >= LONG_PROMPT
                or (self.paragraphs > 1 and self.longest_paragraph >= BESIDE_CHARS)):
            return "doc"
        return "text"

    @property
    def size(self) -> str:
        return "s" if self.tokens < 96 else "m" if self.tokens < LONG_PROMPT else "l"


def prompt_shape(prompt: Sequence[int], tokenizer: Tokenizer,
                 asked: Asked = Asked()) -> PromptShape:
    if asked.text is None:
        text = tokenizer.decode(prompt[-TAIL_TOKENS:])
    else:
        text = f"{asked.before[-TAIL_CHARS:]}\n{asked.text[-TAIL_CHARS:]}"
    visible = sum(not c.isspace() for c in text)
    symbols = sum(c in SYMBOLS for c in text)
    lines = sum(1 for line in text.splitlines() if sum(c in SYMBOLS for c in line) >= 2)
    paragraphs = [p for p in _PARAGRAPH.split(text if asked.text is None else asked.text)
                  if p.strip()]
    return PromptShape(len(prompt), symbols / max(visible, 1), lines, len(paragraphs),
                       max((len(p.strip()) for p in paragraphs), default=0),
                       asked.earlier_turns)


def request_class(requested: str | None, request: GenerationRequest, tokenizer: Tokenizer,
                  *, raw_prompt: bool = False, asked: Callable[[], Asked] = Asked) -> str:
    """``asked``: read only for an unlabelled, unconstrained request (the endpoint's
    ``asked``)."""
    structured = request.sampling.structured
    if structured is not None:
        kind = "json" if structured.kind in ("json", "json_object") else "constrained"
        return f"{requested}:{kind}" if requested else kind
    if requested:
        return requested
    return feature_class(request.prompt_token_ids, tokenizer, raw_prompt=raw_prompt,
                         asked=asked())


def feature_class(prompt: Sequence[int], tokenizer: Tokenizer, *,
                  raw_prompt: bool = False, asked: Asked = Asked()) -> str:
    shape = prompt_shape(prompt, tokenizer, asked)
    return f"auto:{shape.kind}:{shape.size}" + (":raw" if raw_prompt else "")

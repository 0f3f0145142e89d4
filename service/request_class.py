"""The workload class a request is learned under, from what the request itself shows.

The policy learns acceptance and answer length per workload class. Callers rarely
label their traffic, and one pooled class cannot tell a prompt whose answer copies
its own text (where prompt lookup drafts well) from code (where a trained drafter
does) or from free chat. So an unlabelled request gets a class from its own
features: what kind of answer it asks for (``code``, ``copy``: an edit or repeat
of a passage it carries, or a long context to draw on; ``text`` otherwise), how
long its prompt is (``s`` < 96 tokens, ``m`` < 512, ``l``), and its endpoint (raw
``/v1/completions`` prompts continue text rather than answer). The buckets are the
features; what each bucket accepts on each mode is learned online from finished
requests like any class. A caller's label stays a hint that wins. Constrained
output drafts unlike free text whatever the prompt (keys, braces and enum values
are near-certain), so a constrained request is learned as ``json`` (or
``<label>:json``; ``constrained`` for the other kinds of constraint).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engines.request import GenerationRequest
from engines.tokenizer import Tokenizer

# Enough of the prompt to see the instruction and the passage it carries.
TAIL_TOKENS = 768
_CODE = re.compile(
    r"```|\bdef |\bclass \w|\bimport \w|\breturn\b|#include|=>|\bfunction\b|\bpython\b|"
    r"\bjavascript\b|\btypescript\b|\brust\b|\bsql\b|\bcode\b|\bimplement\b|\bregex\b",
    re.IGNORECASE)
_COPY = re.compile(
    r"\brepeat\b|\bcopy\b|\brewrite\b|\bverbatim\b|word for word|\bproofread\b|\bcorrect\b|"
    r"\bfix the\b|\btranslate\b|\breformat\b|\bquote\b|\bextract\b|\bedit\b|\bparaphrase\b",
    re.IGNORECASE)
PASSAGE_CHARS = 80        # a line this long is a passage the answer may draw on
LONG_PROMPT = 512         # tokens: a context long enough that answers quote it


def request_class(requested: str | None, request: GenerationRequest, tokenizer: Tokenizer,
                  *, raw_prompt: bool = False) -> str:
    structured = request.sampling.structured
    if structured is not None:
        kind = "json" if structured.kind in ("json", "json_object") else "constrained"
        return f"{requested}:{kind}" if requested else kind
    if requested:
        return requested
    return feature_class(request.prompt_token_ids, tokenizer, raw_prompt=raw_prompt)


def feature_class(prompt: Sequence[int], tokenizer: Tokenizer, *,
                  raw_prompt: bool = False) -> str:
    text = tokenizer.decode(prompt[-TAIL_TOKENS:])
    n = len(prompt)
    size = "s" if n < 96 else "m" if n < LONG_PROMPT else "l"
    passage = any(len(line) >= PASSAGE_CHARS for line in text.splitlines())
    if _CODE.search(text):
        kind = "code"
    elif (passage and _COPY.search(text)) or n >= LONG_PROMPT:
        kind = "copy"
    else:
        kind = "text"
    return f"auto:{kind}:{size}" + (":raw" if raw_prompt else "")

"""The keyword classifier the router used before its classes were keyword-free: the
baseline ``bench.predictor_eval`` scores the shape classes against, on the same
requests. Not used by the gateway.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engines.tokenizer import Tokenizer

TAIL_TOKENS = 768
CODE = re.compile(
    r"```|\bdef |\bclass \w|\bimport \w|\breturn\b|#include|=>|\bfunction\b|\bpython\b|"
    r"\bjavascript\b|\btypescript\b|\brust\b|\bsql\b|\bcode\b|\bimplement\b|\bregex\b",
    re.IGNORECASE)
COPY = re.compile(
    r"\brepeat\b|\bcopy\b|\brewrite\b|\bverbatim\b|word for word|\bproofread\b|\bcorrect\b|"
    r"\bfix the\b|\btranslate\b|\breformat\b|\bquote\b|\bextract\b|\bedit\b|\bparaphrase\b",
    re.IGNORECASE)
PASSAGE_CHARS = 80
LONG_PROMPT = 512


def keyword_class(prompt: Sequence[int], tokenizer: Tokenizer) -> str:
    text = tokenizer.decode(prompt[-TAIL_TOKENS:])
    n = len(prompt)
    size = "s" if n < 96 else "m" if n < LONG_PROMPT else "l"
    passage = any(len(line) >= PASSAGE_CHARS for line in text.splitlines())
    if CODE.search(text):
        kind = "code"
    elif (passage and COPY.search(text)) or n >= LONG_PROMPT:
        kind = "copy"
    else:
        kind = "text"
    return f"auto:{kind}:{size}"

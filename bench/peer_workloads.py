"""The peer benchmark's phased workloads: what kind of prompt, at what concurrency.

Three kinds of prompt, sent unlabelled: ``code`` (small functions to write: the
trained drafters accept most there), ``copy`` (the answer repeats the prompt's
text: prompt lookup drafts well) and ``chat`` (open-ended writing: plain decoding
wins once the batch is large). ``mixed`` is where routing should matter: copy and
code at low load, chat at high load. ``light`` stays at low load throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.cpu_sweep import CODE, FREE, PASSAGES

MORE_CODE = (
    "Write a Python function `merge_sorted(a, b)` that merges two sorted lists into one "
    "sorted list without using sort().",
    "Write a Python function `count_vowels(text)` that returns how many vowels the text has.",
    "Write a Python class `Stack` with push, pop and peek methods and an is_empty method.",
    "Write a Python function `fibonacci(n)` that returns the first n Fibonacci numbers.",
)
MORE_PASSAGES = (
    "Before the meeting, print the agenda, book the small room on the second floor, order "
    "coffee for twelve people, and send the slides to everyone by noon on Monday.",
    "The train leaves the central station at seven fifteen, stops at Oakfield and "
    "Riverside, and reaches the harbour at eight forty on weekdays and nine on Sundays.",
)
MORE_CHAT = (
    "Tell me about a day at the beach with your family.",
    "Describe a city you would like to visit and why.",
    "Write a letter to a friend you have not seen for years.",
    "What makes a good teacher? Answer in a short paragraph.",
)
PROMPTS: dict[str, tuple[str, ...]] = {
    "code": (*CODE, *MORE_CODE),
    "copy": tuple(f"Repeat the following text word for word.\n\n{p}"
                  for p in (*PASSAGES, *MORE_PASSAGES)),
    "chat": (*FREE, *MORE_CHAT),
}


@dataclass(frozen=True)
class Phase:
    kind: str
    concurrency: int
    requests: int

    @property
    def name(self) -> str:
        return f"{self.kind}@{self.concurrency}"

    def prompts(self) -> list[str]:
        pool = PROMPTS[self.kind]
        return [pool[i % len(pool)] for i in range(self.requests)]


WORKLOADS: dict[str, tuple[Phase, ...]] = {
    "mixed": (Phase("code", 1, 4), Phase("copy", 1, 4), Phase("chat", 16, 32),
              Phase("code", 2, 6), Phase("copy", 4, 8), Phase("chat", 8, 16)),
    "light": (Phase("code", 1, 6), Phase("chat", 2, 6), Phase("copy", 2, 6),
              Phase("chat", 4, 8)),
}

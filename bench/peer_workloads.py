"""The peer benchmark's phased workloads: what kind of prompt, at what concurrency.

Three kinds of prompt, sent unlabelled: ``code`` (small functions to write: the
trained drafters accept most there), ``copy`` (the answer repeats the prompt's
text: prompt lookup drafts well) and ``chat`` (open-ended writing: plain decoding
wins once the batch is large). ``mixed`` is where routing should matter: copy and
code at low load, chat at high load. ``light`` stays at low load throughout.

Those prompts carry the words the request classifier keys on. Two workloads do not:
``sharegpt`` sends real conversations (``bench/sharegpt.py``: first turns, and first
follow-ups with the recorded answer as history) at concurrency 1, 2, 4 and 16, and
``office`` is keyword-free office work written here: changes to a given routine,
questions over a given memo, follow-ups that reuse an earlier answer, and chat; no
phrase of it matches the classifier's lists (a test checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.cpu_sweep import CODE, FREE, PASSAGES
from bench.sharegpt import sharegpt

Message = dict[str, str]
Conversation = tuple[Message, ...]

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


def user(text: str) -> Conversation:
    return ({"role": "user", "content": text},)


ROUTINE = (
    "func printInvoice(items []Item, taxRate float64) {\n"
    "\ttotal := 0.0\n"
    "\tfor _, it := range items {\n"
    "\t\ttotal += it.Price * float64(it.Qty)\n"
    "\t}\n"
    "\tfmt.Printf(\"subtotal %.2f\\n\", total)\n"
    "\tfmt.Printf(\"tax %.2f\\n\", total*taxRate)\n"
    "\tfmt.Printf(\"total %.2f\\n\", total*(1+taxRate))\n"
    "}")
ROUTINE_CHANGES = (
    "Change this Go routine so that it also prints how many items there were. Show all "
    "of it again with the change.",
    "In this Go routine, rename taxRate to vat and total to sum. Show all of it again.",
    "Make this Go routine skip items whose quantity is zero. Show all of it again.",
    "Add a comment line above each statement of this Go routine saying what it does. "
    "Show all of it again.",
)
MEMO = (
    "Memo to all staff, 3 March. From Monday the north entrance will be closed for "
    "repairs until the end of April, so please use the side door on Elm Street. "
    "Parking on level two is reserved for visitors during this time. The canteen will "
    "open at eight instead of half past seven, and it will close at three on Fridays. "
    "Team leaders should send their holiday plans for the summer to Maria Lopez in "
    "human resources by the twentieth of March. The fire drill planned for March has "
    "moved to the ninth of April at eleven in the morning. Laptops must be brought to "
    "the IT desk on the first floor for the security update before the fifteenth. "
    "Questions about any of this can go to the office manager, Tom Baker, on extension "
    "4410.")
MEMO_QUESTIONS = (
    "Which door should staff use while the north entrance is closed, and until when?",
    "Who gets the holiday plans, and by what date?",
    "When is the fire drill now, and when was it planned?",
    "What changes for the canteen, and what changes for parking?",
    "Where do laptops go, by when, and why?",
    "List every date the memo gives, each with what happens on it.",
)
LIST_ASK = "Name eight fruits that grow well in Spain, one per line, with a short note on each."
LIST_ANSWER = (
    "1. Oranges - grown widely around Valencia.\n"
    "2. Lemons - common in Murcia.\n"
    "3. Olives - the main crop of Andalusia.\n"
    "4. Grapes - grown for wine across La Rioja.\n"
    "5. Figs - easy to find in Extremadura.\n"
    "6. Almonds - planted on dry hills in the south.\n"
    "7. Cherries - famous in the Jerte Valley.\n"
    "8. Strawberries - grown near Huelva.")
LIST_FOLLOW_UPS = (
    "Now give the same list in reverse order.",
    "Now give the same list sorted by name, keeping each note.",
    "Give the same list again, but with each note in capital letters.",
    "Now put the same list in a table with two columns, fruit and note.",
)
OFFICE_CHAT = (
    "What is a good way to start a team meeting on a Monday morning?",
    "Give some advice for someone starting their first office job.",
    "How can a small team keep its shared calendar tidy?",
    "Describe a pleasant lunch break in a busy city.",
    "What makes an email easy to read? Answer in a short paragraph.",
    "Suggest a plan for a team outing in the spring.",
)


def _office() -> dict[str, tuple[Conversation, ...]]:
    return {
        "changes": tuple(user(f"{c}\n\n{ROUTINE}") for c in ROUTINE_CHANGES),
        "memo": tuple(user(f"{MEMO}\n\n{q}") for q in MEMO_QUESTIONS),
        "followups": tuple(({"role": "user", "content": LIST_ASK},
                            {"role": "assistant", "content": LIST_ANSWER},
                            {"role": "user", "content": f}) for f in LIST_FOLLOW_UPS),
        "officechat": tuple(user(c) for c in OFFICE_CHAT),
    }


def _sharegpt() -> dict[str, tuple[Conversation, ...]]:
    got = sharegpt()
    return {"firsts": got.first_turns, "followup": got.follow_ups}


# Each kind's conversations, built when a phase first asks (ShareGPT is read from disk).
SOURCES: dict[str, Callable[[], tuple[Conversation, ...]]] = {
    **{kind: (lambda kind=kind: tuple(user(p) for p in PROMPTS[kind]))  # type: ignore[misc]
       for kind in PROMPTS},
    **{kind: (lambda kind=kind: _office()[kind]) for kind in _office()},  # type: ignore[misc]
    "firsts": lambda: _sharegpt()["firsts"],
    "followup": lambda: _sharegpt()["followup"],
}


@dataclass(frozen=True)
class Phase:
    kind: str
    concurrency: int
    requests: int
    # Where in its kind's pool the phase starts: two phases of one kind send different
    # conversations.
    offset: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}@{self.concurrency}"

    def prompts(self) -> list[Conversation]:
        pool = SOURCES[self.kind]()
        return [pool[(self.offset + i) % len(pool)] for i in range(self.requests)]


WORKLOADS: dict[str, tuple[Phase, ...]] = {
    "mixed": (Phase("code", 1, 4), Phase("copy", 1, 4), Phase("chat", 16, 32),
              Phase("code", 2, 6), Phase("copy", 4, 8), Phase("chat", 8, 16)),
    "light": (Phase("code", 1, 6), Phase("chat", 2, 6), Phase("copy", 2, 6),
              Phase("chat", 4, 8)),
    "sharegpt": (Phase("firsts", 1, 4), Phase("followup", 1, 4),
                 Phase("firsts", 2, 6, 4), Phase("followup", 2, 6, 4),
                 Phase("firsts", 4, 8, 10), Phase("followup", 4, 8, 10),
                 Phase("firsts", 16, 32, 18), Phase("followup", 16, 32, 18)),
    "office": (Phase("changes", 1, 4), Phase("memo", 1, 4), Phase("followups", 2, 4),
               Phase("changes", 2, 6, 1), Phase("memo", 4, 8, 2),
               Phase("officechat", 8, 16), Phase("followups", 4, 8, 1),
               Phase("officechat", 16, 32, 3)),
}

"""The decision log's entries: each auto or forced decision with what it was made from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from policies.base import Decision, DecisionKind, LearnedAcceptance, ModeLoad


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One decision with the inputs it was made from, for audit and offline replay;
    rendered to strings only when the store sync ships it, off the request path."""

    request_id: str
    now: float
    workload_class: str
    prompt_tokens: int
    max_tokens: int | None
    decision: Decision
    modes: Mapping[str, ModeLoad]
    acceptance: Mapping[str, LearnedAcceptance]
    arriving: int = 0      # other requests of its burst, still waiting for a decision

    def as_strings(self) -> dict[str, str]:
        d = self.decision
        return {
            "ts": f"{self.now:.6f}", "request_id": self.request_id, "mode": d.mode,
            "reason": d.reason, "kind": d.kind.value,
            "margin": "" if d.margin is None else f"{d.margin:.4f}",
            "forced": "1" if d.kind is DecisionKind.OVERRIDE else "0",
            "class": self.workload_class, "prompt_tokens": str(self.prompt_tokens),
            "max_tokens": "" if self.max_tokens is None else str(self.max_tokens),
            "scores": json.dumps(dict(d.scores), separators=(",", ":")),
            "batch": json.dumps({m: load.batch_size for m, load in self.modes.items()},
                                separators=(",", ":")),
            "arriving": str(self.arriving),
            "acceptance": json.dumps({m: round(a.mean_accepted_length, 3)
                                      for m, a in self.acceptance.items()},
                                     separators=(",", ":")),
        }

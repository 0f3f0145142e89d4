"""What the policy learns from, kept behind one interface.

Two implementations: Redis (shared by every gateway replica) and in-memory
(the embedded default, one process). Numbers that must follow drift
(acceptance, output length) are *time-decayed sums*: a stored sum ``S`` last
updated at ``t`` is worth ``S * 2 ** (-(now - t) / half_life_s)`` at ``now``;
adding ``x`` at ``now`` stores ``S * decay + x`` with ``t = now``. Updates
are atomic, so replicas adding at the same time never lose each other's data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def decay_factor(elapsed_s: float, half_life_s: float) -> float:
    if elapsed_s <= 0:
        return 1.0
    return float(2.0 ** (-elapsed_s / half_life_s))


@dataclass(frozen=True, slots=True)
class AcceptanceSums:
    """Decayed sums of finished requests' spec-decode counts for one (mode, class)."""

    drafts: float = 0.0              # decode steps (a step that drafted nothing counts)
    draft_tokens: float = 0.0
    accepted: float = 0.0
    requests: float = 0.0
    updated_at: float = 0.0

    def decayed(self, now: float, half_life_s: float) -> AcceptanceSums:
        f = decay_factor(now - self.updated_at, half_life_s)
        return AcceptanceSums(self.drafts * f, self.draft_tokens * f, self.accepted * f,
                              self.requests * f, max(now, self.updated_at))

    def plus(self, other: AcceptanceSums, now: float, half_life_s: float) -> AcceptanceSums:
        d = self.decayed(now, half_life_s)
        o = other.decayed(now, half_life_s)
        return AcceptanceSums(d.drafts + o.drafts, d.draft_tokens + o.draft_tokens,
                              d.accepted + o.accepted, d.requests + o.requests, now)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens per verification step, the bonus token included."""
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None


@dataclass(frozen=True, slots=True)
class OutputLengthSums:
    """Decayed sums of finished requests' completion tokens for one workload class."""

    tokens: float = 0.0
    requests: float = 0.0
    updated_at: float = 0.0

    def decayed(self, now: float, half_life_s: float) -> OutputLengthSums:
        f = decay_factor(now - self.updated_at, half_life_s)
        return OutputLengthSums(self.tokens * f, self.requests * f, max(now, self.updated_at))

    def plus(self, other: OutputLengthSums, now: float, half_life_s: float) -> OutputLengthSums:
        d = self.decayed(now, half_life_s)
        o = other.decayed(now, half_life_s)
        return OutputLengthSums(d.tokens + o.tokens, d.requests + o.requests, now)

    @property
    def mean(self) -> float | None:
        return self.tokens / self.requests if self.requests > 0 else None


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One gateway replica's view of its engines, published with a TTL.

    ``modes`` maps mode -> {"running", "waiting", "in_flight", "kv_cache_usage"};
    ``step_profile`` maps mode -> {batch bucket (str) -> [mean step seconds, samples]}.
    Plain JSON-able values so that every store can keep it as one document.
    """

    replica_id: str
    at: float
    modes: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    step_profile: Mapping[str, Mapping[str, list[float]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoreState:
    """Everything the store holds, as read at one moment."""

    acceptance: Mapping[tuple[str, str], AcceptanceSums]   # (mode, class) -> sums
    output_length: Mapping[str, OutputLengthSums]           # class -> sums
    replicas: Mapping[str, ReplicaLoad]                     # live (unexpired) replicas only
    settings: Mapping[str, Any] | None                      # None: never set
    settings_version: int                                   # 0 when never set


class StoreUnavailable(Exception):
    """The backing store cannot be reached, or did not answer in time (``slow``)."""

    def __init__(self, message: str, *, slow: bool = False) -> None:
        super().__init__(message)
        self.slow = slow


class PolicyStore(ABC):
    """Async, atomic, bounded-time operations; raise StoreUnavailable on outage."""

    @abstractmethod
    async def add_acceptance(self, mode: str, workload_class: str, sums: AcceptanceSums,
                             now: float, half_life_s: float) -> None:
        """Atomically: stored = stored.decayed(now) + sums.decayed(now)."""

    @abstractmethod
    async def add_output_length(self, workload_class: str, sums: OutputLengthSums,
                                now: float, half_life_s: float) -> None: ...

    @abstractmethod
    async def put_replica_load(self, load: ReplicaLoad, ttl_s: float) -> None: ...

    @abstractmethod
    async def put_settings(self, settings: Mapping[str, Any]) -> int:
        """Replace the live policy settings; returns the new version (1, 2, ...)."""

    @abstractmethod
    async def settings_version(self) -> int:
        """Cheap check used to poll for changes; 0 when never set."""

    @abstractmethod
    async def log_decisions(self, entries: Sequence[Mapping[str, str]]) -> None:
        """Append to the capped decision log, oldest first, in one round trip."""

    @abstractmethod
    async def recent_decisions(self, count: int) -> list[dict[str, str]]:
        """Newest last."""

    @abstractmethod
    async def read_state(self) -> StoreState: ...

    @abstractmethod
    async def claim(self, name: str, ttl_s: float) -> bool:
        """True for exactly one caller until ``ttl_s`` passes (SET NX semantics)."""

    @abstractmethod
    async def ping(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

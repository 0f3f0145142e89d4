"""The decision contract: typed inputs in, a ``Decision`` out, no I/O inside.

``decide`` must stay pure (no clock reads, no network, no engine calls) so that
it is cheap on the request path, testable from tables, and replayable from a
decision log. Whatever it needs, including the time, arrives in ``DecisionInput``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

DEFAULT_WORKLOAD_CLASS = "default"


@dataclass(frozen=True, slots=True)
class ModeLoad:
    """What the policy knows about one configured mode's engine right now."""

    mode: str
    up: bool
    batch_size: int
    speculative: bool
    # False while the mode's admission queue is full: not a candidate for this
    # request, though its batch still runs on its device.
    has_room: bool = True
    kv_cache_usage: float = 0.0
    # Measured draft acceptance (accepted / drafted) over a recent window;
    # None until the engine has drafted anything.
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    # Static facts from the configuration.
    method: str | None = None            # None: plain decoding
    num_speculative_tokens: int = 0
    gpu_group: str = "0"                 # engines in one group share (time-slice) a device
    # Measured decode step time by batch size: ((batch, seconds, samples), ...).
    step_profile: tuple[tuple[int, float, int], ...] = ()
    # Measured device seconds to prefill one request (the traffic's prompts and prefix-
    # cache hits); None: unmeasured.
    prefill_s: float | None = None
    # vLLM's ``num_speculative_tokens_per_batch_size``: ((first, last, K), ...) sorted
    # by first batch; empty: K is ``num_speculative_tokens`` at every batch.
    k_schedule: tuple[tuple[int, int, int], ...] = ()
    # Measured seconds a step spends per draft token it verifies, and the draft tokens
    # per sequence ``step_profile`` is reported at: n-gram drafts only where the text
    # repeats, so its step depends on the class it serves (``policies.step_model.step_time``).
    # 0: unmeasured, or a drafter that drafts K tokens every step.
    draft_token_s: float = 0.0
    step_drafted: float = 0.0
    # Its acceptance is replayed on every finished answer, whoever served it (prompt
    # lookup: ``engines/prompt_lookup.py``): measured without being explored.
    replayed: bool = False

    def draft_length(self, batch: float) -> int:
        """Draft tokens per sequence a step verifies at ``batch``. With a K table, as
        vLLM reads it: the range holding the batch, a gap or the tail keeping the K
        of the range before, never above ``num_speculative_tokens``."""
        if self.method is None:
            return 0
        k = self.num_speculative_tokens
        for first, _last, table_k in self.k_schedule:
            if batch < first:
                break
            k = min(table_k, self.num_speculative_tokens)
        return k


@dataclass(frozen=True, slots=True)
class LearnedAcceptance:
    """Decayed acceptance of one mode on one workload class, from finished requests."""

    mean_accepted_length: float
    acceptance_rate: float
    requests: float                      # decayed count of finished requests
    drafts: float = 0.0                  # decayed count of verification steps: the evidence
    # Draft tokens per verification step: K for a drafter that always drafts, less for
    # n-gram where the text does not repeat. None: unknown.
    draft_tokens_per_step: float | None = None
    # Measured on other kinds of text than the class it stands in for: believed only
    # where it is below the prior (``policies/class_prior.py``).
    transferred: bool = False

    @property
    def carded(self) -> bool:
        """A drafter card's figure (``class_prior.borrowed``): evidence in steps, no
        request measured here."""
        return self.requests <= 0 and self.drafts > 0 and not self.transferred


@dataclass(frozen=True, slots=True)
class ClassLearned:
    """What the shared store has learned about one workload class."""

    acceptance: Mapping[str, LearnedAcceptance] = field(
        default_factory=lambda: MappingProxyType({}))   # mode -> acceptance on this class
    expected_output_tokens: float | None = None          # decayed mean completion length
    requests: float = 0.0                # decayed count of finished requests: the recent mix


@dataclass(frozen=True, slots=True)
class DecisionInput:
    modes: Mapping[str, ModeLoad]
    prompt_tokens: int
    # The caller's max_tokens; None when the caller left it open.
    max_tokens: int | None
    now: float
    workload_class: str = DEFAULT_WORKLOAD_CLASS
    # What the shared store has learned (empty/None before any measurement).
    acceptance: Mapping[str, LearnedAcceptance] = field(
        default_factory=lambda: MappingProxyType({}))   # mode -> this class's acceptance
    expected_output_tokens: float | None = None          # learned mean for this class
    previous_mode: str | None = None                     # last auto winner for this class
    # When each mode last won an auto decision, any class (larger is later): while a
    # device group is busy, hysteresis holds its latest winner.
    last_won: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    explore_draw: float = 1.0                            # uniform [0, 1), drawn by the caller
    # Since when each device group's cost leader has led without a break (mode -> time,
    # from ``Decision.leader``): a lasting lead needs a smaller margin to win.
    leading_since: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Since when each device group's held mode has deferred a switch to whichever mode
    # led it beyond the margin (mode -> time; ``Decision.deferred``).
    deferred_since: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Each device group's recent batch: its requests in flight averaged over the last
    # ``batch_memory_s`` (group -> requests; ``RoutingMemory.recent_batch``). A group
    # that empties between closed-loop waves is priced at the batch the next wave
    # brings, not as if this request would run alone.
    recent_batch: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Other requests that arrived with this one and are still waiting for their
    # decision (``service/arrivals.py``): they join a device group within moments, so
    # each group is priced with them, and every request of a burst at the burst's batch.
    arriving: int = 0
    # The auto requests of each class that arrived over about the last ``mix_memory_s``
    # (class -> decayed count; ``RoutingMemory.recent_arrivals``): the recent mix a
    # busy group's next requests are drawn from.
    recent_arrivals: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({}))
    # The mix each device group serves: requests in flight on this replica, forced
    # ones included (mode -> workload class -> count), and what is learned about
    # those classes (class -> ClassLearned). Empty: decide on this request's class alone.
    in_flight: Mapping[str, Mapping[str, int]] = field(
        default_factory=lambda: MappingProxyType({}))
    classes: Mapping[str, ClassLearned] = field(
        default_factory=lambda: MappingProxyType({}))
    # Each mode's acceptance over every class together (``pooled_acceptance``): what
    # its drafter accepts on this hardware, the prior for a class it has little
    # evidence on. Empty: the published priors alone.
    mode_acceptance: Mapping[str, LearnedAcceptance] = field(
        default_factory=lambda: MappingProxyType({}))
    # For an unlabelled request, each mode's evidence on the request's kind of text (its
    # feature class's family; a drafter card's figure is no evidence): a mode measured
    # on the kind is not unmeasured on a new size of it. Empty for a label.
    kind_evidence: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({}))
    # Device groups whose switch moves every request in flight to the new mode at once
    # (the gateway's exclusive CPU group): a switch there leaves no engine draining.
    moving_groups: frozenset[str] = frozenset()


def group_busy(modes: Mapping[str, ModeLoad], group: str) -> bool:
    """Does any engine of device group ``group`` hold requests?"""
    return any(m.batch_size > 0 for m in modes.values() if m.gpu_group == group)


def pooled_acceptance(classes: Mapping[str, ClassLearned]) -> dict[str, LearnedAcceptance]:
    """Each mode's learned acceptance over every class, weighted by evidence
    (verification steps): its drafter's own level, whatever the class."""
    sums: dict[str, list[float]] = {}
    for known in classes.values():
        for mode, a in known.acceptance.items():
            if a.drafts <= 0:
                continue
            acc = sums.setdefault(mode, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            acc[0] += a.drafts
            acc[1] += a.drafts * a.mean_accepted_length
            acc[2] += a.drafts * a.acceptance_rate
            acc[3] += a.requests
            if a.draft_tokens_per_step is not None:
                acc[4] += a.drafts * a.draft_tokens_per_step
                acc[5] += a.drafts
    return {mode: LearnedAcceptance(length / drafts, rate / drafts, requests, drafts,
                                    drafted / known if known > 0 else None)
            for mode, (drafts, length, rate, requests, drafted, known) in sums.items()}


class DecisionKind(StrEnum):
    """How a mode was chosen; the value is the ``reason`` label on metrics."""

    OVERRIDE = "override"   # forced by the caller's x-spec-mode; no policy ran
    RULE = "rule"           # a static rule of the rule policy
    COST = "cost"           # the cheapest expected cost
    HOLD = "hold"           # hysteresis kept the incumbent although another is cheaper
    EXPLORE = "explore"     # a bounded exploration draw
    MOVE = "move"           # an auto request continued on the mode its device group moved to
    FAILOVER = "failover"   # a request continued on this mode after its engine died


@dataclass(frozen=True, slots=True)
class Decision:
    mode: str
    kind: DecisionKind
    # RULE: which rule fired, e.g. ``batch>32``.
    rule: str = ""
    # COST: how much dearer the runner-up is (0.27 = 27%); HOLD: how much dearer the
    # held mode is than the cheapest; None otherwise.
    margin: float | None = None
    scores: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # The cheapest mode by cost, whether or not it was chosen; None for a forced mode.
    leader: str | None = None
    # HOLD beyond the margin: the switch to ``leader`` waits for its lead to pay for
    # the drain (``AdaptivePolicy._defer``).
    deferred: bool = False
    # A request field some modes cannot serve: the choice was made among the others.
    narrowed: str = ""

    @property
    def reason(self) -> str:
        """The ``x-spec-decision`` header: ``override``, ``rule:batch>32``,
        ``cost:ngram +27%``, ``hold:eagle3 -5%``, ``explore:dflash``, ``move:eagle3``,
        ``failover:standard``;
        `` needs:min_p`` after it when that field ruled some modes out."""
        reason = self._reason()
        return f"{reason} needs:{self.narrowed}" if self.narrowed else reason

    def _reason(self) -> str:
        kind = self.kind
        if kind is DecisionKind.OVERRIDE:
            return kind.value
        if kind is DecisionKind.RULE:
            return f"rule:{self.rule}"
        if kind in (DecisionKind.EXPLORE, DecisionKind.MOVE, DecisionKind.FAILOVER):
            return f"{kind.value}:{self.mode}"
        sign = "+" if kind is DecisionKind.COST else "-"
        return f"{kind.value}:{self.mode} {sign}{self.margin or 0.0:.0%}"


def forced(mode: str) -> Decision:
    """The decision for a mode the caller forced: no policy is consulted."""
    return Decision(mode, DecisionKind.OVERRIDE)


class NoModeAvailable(Exception):
    """Every configured mode is down; nothing can serve the request."""


if TYPE_CHECKING:
    from policies.adaptive_settings import AdaptiveSettings


class Policy(ABC):
    name: str

    @property
    def batch_memory_s(self) -> float:
        """How long a device group's recent batch is remembered (0: not at all)."""
        return 0.0

    @property
    def mix_memory_s(self) -> float:
        """How long the classes of recent auto requests are remembered (0: not at all)."""
        return 0.0

    @property
    def card_discount(self) -> float:
        """The share of a drafter card's gain taken off until its kind is measured here
        (``class_prior.borrowed``)."""
        return 0.0

    def follow(self, settings: AdaptiveSettings) -> None:  # noqa: B027 (optional hook)
        """The shared live settings changed (``PUT /admin/policy`` on any replica); a
        policy without live settings has nothing to follow."""

    @abstractmethod
    def decide(self, inputs: DecisionInput) -> Decision:
        """Pick the mode to serve one request. Raises NoModeAvailable."""

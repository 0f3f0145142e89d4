"""What the policy has learned, as a request sees it: acceptance and output length
per mode and workload class.

The local view is the store's last snapshot plus what this replica observed since
(buffers the store sync ships, ``store_sync.py``). Reads and ``observe`` do no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from policies.base import (
    DEFAULT_WORKLOAD_CLASS,
    ClassLearned,
    LearnedAcceptance,
    pooled_acceptance,
)
from policies.store.base import AcceptanceSums, OutputLengthSums, StoreState

# The learned-state snapshot is recomputed at least this often (see learned_classes).
SNAPSHOT_REFRESH_S = 1.0


@dataclass(slots=True)
class Buffers:
    acceptance: dict[tuple[str, str], AcceptanceSums] = field(default_factory=dict)
    output_length: dict[str, OutputLengthSums] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.acceptance or self.output_length)


class LearnedStats:
    """``half_life`` gives the current acceptance half-life (it can change live)."""

    def __init__(self, half_life: Callable[[], float], max_classes: int = 64) -> None:
        self.half_life = half_life
        self.max_classes = max_classes
        self.remote = StoreState({}, {}, {}, None, 0)
        self.pending = Buffers()     # observed, not yet sent
        self.inflight = Buffers()    # sent, not yet acknowledged
        self._classes: set[str] = {DEFAULT_WORKLOAD_CLASS}
        self._learned: dict[str, ClassLearned] | None = None   # see learned_classes
        self._learned_at = 0.0
        self._learned_half_life = 0.0
        self._dirty: set[str] = set()
        self._pooled: dict[str, LearnedAcceptance] | None = None   # of _learned

    def workload_class(self, requested: str | None) -> str:
        """Bounded cardinality: past ``max_classes`` new names count as the default."""
        if requested is None:
            return DEFAULT_WORKLOAD_CLASS
        if requested in self._classes or len(self._classes) < self.max_classes:
            self._classes.add(requested)
            return requested
        return DEFAULT_WORKLOAD_CLASS

    def known_classes(self) -> list[str]:
        return sorted({cls for (_, cls) in self.remote.acceptance} | self._classes)

    def acceptance_for(self, workload_class: str, now: float) -> dict[str, LearnedAcceptance]:
        half_life = self.half_life()
        sums: dict[str, AcceptanceSums] = {}
        for source in self._acceptance_sources():
            for (mode, cls), s in source.items():
                if cls == workload_class:
                    sums[mode] = sums[mode].plus(s, now, half_life) if mode in sums \
                        else s.decayed(now, half_life)
        result = {}
        for mode, s in sums.items():
            length = s.mean_accepted_length
            if length is not None:      # steps but no draft tokens: nothing accepted
                result[mode] = LearnedAcceptance(length, s.acceptance_rate or 0.0,
                                                 s.requests, s.drafts,
                                                 s.draft_tokens / s.drafts)
        return result

    def expected_output(self, workload_class: str, now: float) -> float | None:
        return self._finished(workload_class, now).mean

    def learned_classes(self, now: float, also: Iterable[str] = ()) -> Mapping[str, ClassLearned]:
        """``acceptance_for`` and ``expected_output`` of every class with finished
        requests, and of ``also`` (the classes in the recent mix and in flight).

        A snapshot, not recomputed per request: see docs/policy.md, "Decision cost".
        Means are exact; request counts lag by at most ``SNAPSHOT_REFRESH_S``."""
        learned = self._snapshot(now)
        missing = [cls for cls in also if cls not in learned]
        if not missing:
            return learned
        return {**learned, **{cls: ClassLearned() for cls in missing}}

    def pooled_acceptance(self, now: float) -> Mapping[str, LearnedAcceptance]:
        """``pooled_acceptance`` of ``learned_classes``, worked out once per snapshot
        rather than per request (a class only named in ``also`` has learned nothing)."""
        learned = self._snapshot(now)
        if self._pooled is None:
            self._pooled = pooled_acceptance(learned)
        return self._pooled

    def _snapshot(self, now: float) -> dict[str, ClassLearned]:
        """What is learned as of ``now``, refreshed as ``learned_classes`` says."""
        half_life = self.half_life()
        learned = self._learned
        if learned is None or half_life != self._learned_half_life or \
                not 0.0 <= now - self._learned_at <= SNAPSHOT_REFRESH_S:
            classes = {cls for source in self._acceptance_sources() for (_, cls) in source} | \
                {cls for source in self._output_sources() for cls in source}
            learned = self._learned = {cls: self._class_learned(cls, now) for cls in classes}
            self._learned_at, self._learned_half_life = now, half_life
            self._dirty.clear()
            self._pooled = None
        elif self._dirty:
            for cls in self._dirty:
                learned[cls] = self._class_learned(cls, now)
            self._dirty.clear()
            self._pooled = None
        return learned

    def observe(self, mode: str, workload_class: str, drafts: int, draft_tokens: int,
                accepted: int, completion_tokens: int, now: float,
                speculative: bool | None = None, answer_tokens: int | None = None) -> None:
        """Feed back one finished request (forced or not). Learns tokens per *decode
        step* (its tokens after the first, less the accepted ones), not per draft:
        see docs/policy.md, "Workload class and learned state". ``speculative`` None: a
        mode that drafted anything. ``completion_tokens``: what ``mode`` served of it;
        ``answer_tokens``: the whole answer, which the class's length learns (a moved
        request's other engines served the rest); None: the same."""
        self.observe_acceptance(mode, workload_class, drafts, draft_tokens, accepted,
                                completion_tokens, now, speculative)
        half_life = self.half_life()
        length = completion_tokens if answer_tokens is None else answer_tokens
        out = OutputLengthSums(length, 1.0, now)
        current_out = self.pending.output_length.get(workload_class)
        self.pending.output_length[workload_class] = out if current_out is None else \
            current_out.plus(out, now, half_life)

    def observe_acceptance(self, mode: str, workload_class: str, drafts: int,
                           draft_tokens: int, accepted: int, completion_tokens: int,
                           now: float, speculative: bool | None = None) -> None:
        """What one engine served of a request, acceptance only: ``observe`` for a
        finished request, and on its own for the part a request served on an engine
        before it moved off it (``service/moves.py``), whose length is not an answer's.
        Without it, a mode the device group moved away from keeps only the evidence of
        the requests that finished there, and its prior decides for it from then on."""
        if speculative is None:
            speculative = drafts > 0 or draft_tokens > 0
        steps = max(drafts, completion_tokens - 1 - accepted) if speculative else 0
        if steps > 0:
            key = (mode, workload_class)
            add = AcceptanceSums(steps, draft_tokens, accepted, 1.0, now)
            current = self.pending.acceptance.get(key)
            self.pending.acceptance[key] = add if current is None else \
                current.plus(add, now, self.half_life())
        self._dirty.add(workload_class)

    # --- for the store sync --------------------------------------------------------

    def start_sending(self) -> Buffers:
        """Move what is pending to in flight (observations made while it is sent land
        in a fresh buffer) and return everything not yet acknowledged."""
        half_life = self.half_life()
        for key, sums in self.pending.acceptance.items():
            have = self.inflight.acceptance.get(key)
            self.inflight.acceptance[key] = sums if have is None else \
                have.plus(sums, sums.updated_at, half_life)
        for cls, out in self.pending.output_length.items():
            have_out = self.inflight.output_length.get(cls)
            self.inflight.output_length[cls] = out if have_out is None else \
                have_out.plus(out, out.updated_at, half_life)
        self.pending = Buffers()
        return self.inflight

    def acknowledged(self, flushed: Buffers, now: float) -> None:
        """The store holds ``flushed``: never send it again, and count it in the local
        copy of the store's state until the next read."""
        for key in flushed.acceptance:
            del self.inflight.acceptance[key]
        for cls in flushed.output_length:
            del self.inflight.output_length[cls]
        self.remote = _merge(self.remote, flushed, now, self.half_life())
        self._learned = None

    def read(self, state: StoreState) -> None:
        """The store's state as just read."""
        self.remote = state
        self._learned = None

    def _acceptance_sources(self) -> Iterator[Mapping[tuple[str, str], AcceptanceSums]]:
        yield from (self.remote.acceptance, self.inflight.acceptance, self.pending.acceptance)

    def _output_sources(self) -> Iterator[Mapping[str, OutputLengthSums]]:
        yield from (self.remote.output_length, self.inflight.output_length,
                    self.pending.output_length)

    def _finished(self, cls: str, now: float) -> OutputLengthSums:
        total = OutputLengthSums()
        half_life = self.half_life()
        for source in self._output_sources():
            if cls in source:
                total = total.plus(source[cls], now, half_life)
        return total

    def _class_learned(self, cls: str, now: float) -> ClassLearned:
        finished = self._finished(cls, now)
        return ClassLearned(self.acceptance_for(cls, now),
                            finished.mean if finished.requests else None, finished.requests)


def _merge(state: StoreState, flushed: Buffers, now: float, half_life: float) -> StoreState:
    if not flushed:
        return state
    acceptance: dict[tuple[str, str], AcceptanceSums] = dict(state.acceptance)
    for key, sums in flushed.acceptance.items():
        acceptance[key] = acceptance[key].plus(sums, now, half_life) if key in acceptance \
            else sums
    output: dict[str, OutputLengthSums] = dict(state.output_length)
    for cls, out in flushed.output_length.items():
        output[cls] = output[cls].plus(out, now, half_life) if cls in output else out
    return StoreState(acceptance, output, state.replicas, state.settings,
                      state.settings_version)

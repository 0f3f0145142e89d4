"""The policy's learned state, shared through a store, never on the request path.

Requests read a local view (the last snapshot read from the store plus what
this replica observed since) and append observations to local buffers; a
background loop flushes the buffers and re-reads the store a few times a
second. So a slow or dead store can never fail or slow a request: while it is
down, the replica keeps learning locally, retries with backoff, and on
reconnection flushes what it buffered (nothing is counted twice: a buffer is
dropped only after the store acknowledged it) and re-reads the shared state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from policies.adaptive_settings import AdaptiveSettings
from policies.base import DEFAULT_WORKLOAD_CLASS, ClassLearned, LearnedAcceptance
from policies.store.base import (
    AcceptanceSums,
    OutputLengthSums,
    PolicyStore,
    ReplicaLoad,
    StoreState,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

LoadProvider = Callable[[], ReplicaLoad]
# Syncs in a row that may fail on a slow reply before the store counts as down.
SLOW_SYNCS_TOLERATED = 1


@dataclass(slots=True)
class _Buffers:
    acceptance: dict[tuple[str, str], AcceptanceSums] = field(default_factory=dict)
    output_length: dict[str, OutputLengthSums] = field(default_factory=dict)


class SharedPolicyState:
    def __init__(self, store: PolicyStore, replica_id: str,
                 settings: AdaptiveSettings | None = None, *,
                 clock: Callable[[], float] = time.time, sync_interval_s: float = 0.25,
                 load_ttl_s: float = 5.0, max_classes: int = 64,
                 max_buffered_decisions: int = 10_000) -> None:
        self.store = store
        self.replica_id = replica_id
        self.settings = settings or AdaptiveSettings()
        self.settings_version = 0
        self.clock = clock
        self.sync_interval_s = sync_interval_s
        self.load_ttl_s = load_ttl_s
        self.max_classes = max_classes
        self.load_provider: LoadProvider | None = None
        self.store_up = True
        self._slow_in_row = 0  # syncs in a row that failed on a slow reply
        self.last_error: str | None = None
        self.outages = 0
        self.last_sync_at: float | None = None
        self.decisions_dropped = 0
        self._remote = StoreState({}, {}, {}, None, 0)
        self._pending = _Buffers()
        self._inflight = _Buffers()
        self._decisions: deque[dict[str, str]] = deque(maxlen=max_buffered_decisions)
        self._classes: set[str] = {DEFAULT_WORKLOAD_CLASS}
        self._settings_listeners: list[Callable[[AdaptiveSettings], None]] = []
        self._stopping = False

    # --- request path: local, no I/O -------------------------------------------------

    def workload_class(self, requested: str | None) -> str:
        """Bounded cardinality: past ``max_classes`` new names count as the default."""
        if requested is None:
            return DEFAULT_WORKLOAD_CLASS
        if requested in self._classes or len(self._classes) < self.max_classes:
            self._classes.add(requested)
            return requested
        return DEFAULT_WORKLOAD_CLASS

    def acceptance_for(self, workload_class: str, now: float) -> dict[str, LearnedAcceptance]:
        half_life = self.settings.acceptance_half_life_s
        sums: dict[str, AcceptanceSums] = {}
        for source in (self._remote.acceptance, self._inflight.acceptance,
                       self._pending.acceptance):
            for (mode, cls), s in source.items():
                if cls == workload_class:
                    sums[mode] = sums[mode].plus(s, now, half_life) if mode in sums \
                        else s.decayed(now, half_life)
        result = {}
        for mode, s in sums.items():
            length = s.mean_accepted_length
            if length is not None:      # steps but no draft tokens: nothing accepted
                result[mode] = LearnedAcceptance(length, s.acceptance_rate or 0.0,
                                                 s.requests, s.drafts)
        return result

    def expected_output(self, workload_class: str, now: float) -> float | None:
        half_life = self.settings.acceptance_half_life_s
        total = OutputLengthSums()
        for source in (self._remote.output_length, self._inflight.output_length,
                       self._pending.output_length):
            if workload_class in source:
                total = total.plus(source[workload_class], now, half_life)
        return total.mean

    def learned_classes(self, now: float, also: Iterable[str] = ()) -> dict[str, ClassLearned]:
        """``acceptance_for`` and ``expected_output`` of every class with finished
        requests, and of ``also``, in one pass over the state: the mix of classes
        recently served and of those in flight, for ``DecisionInput.classes``."""
        half_life = self.settings.acceptance_half_life_s
        sums: dict[str, dict[str, AcceptanceSums]] = {}
        lengths: dict[str, OutputLengthSums] = {}
        for source, out_source in ((self._remote.acceptance, self._remote.output_length),
                                   (self._inflight.acceptance, self._inflight.output_length),
                                   (self._pending.acceptance, self._pending.output_length)):
            for (mode, cls), s in source.items():
                by_mode = sums.setdefault(cls, {})
                by_mode[mode] = by_mode[mode].plus(s, now, half_life) if mode in by_mode \
                    else s.decayed(now, half_life)
            for cls, out in out_source.items():
                have = lengths.get(cls)
                lengths[cls] = out.decayed(now, half_life) if have is None else \
                    have.plus(out, now, half_life)
        result = {}
        for cls in {*lengths, *also}:
            acceptance = {}
            for mode, a in sums.get(cls, {}).items():
                length = a.mean_accepted_length
                if length is not None:
                    acceptance[mode] = LearnedAcceptance(length, a.acceptance_rate or 0.0,
                                                         a.requests, a.drafts)
            finished = lengths.get(cls)
            result[cls] = ClassLearned(acceptance, finished.mean if finished else None,
                                       finished.requests if finished else 0.0)
        return result

    def known_classes(self) -> list[str]:
        return sorted({cls for (_, cls) in self._remote.acceptance} | self._classes)

    def observe(self, mode: str, workload_class: str, drafts: int, draft_tokens: int,
                accepted: int, completion_tokens: int, now: float,
                speculative: bool | None = None) -> None:
        """Feed back one finished request (forced or not). Learns tokens per *decode
        step* (its tokens after the first, less the accepted ones), not per draft:
        see docs/policy.md, "Design notes". ``speculative`` None: a mode that drafted
        anything."""
        half_life = self.settings.acceptance_half_life_s
        if speculative is None:
            speculative = drafts > 0 or draft_tokens > 0
        steps = max(drafts, completion_tokens - 1 - accepted) if speculative else 0
        if steps > 0:
            key = (mode, workload_class)
            add = AcceptanceSums(steps, draft_tokens, accepted, 1.0, now)
            current = self._pending.acceptance.get(key)
            self._pending.acceptance[key] = add if current is None else \
                current.plus(add, now, half_life)
        out = OutputLengthSums(completion_tokens, 1.0, now)
        current_out = self._pending.output_length.get(workload_class)
        self._pending.output_length[workload_class] = out if current_out is None else \
            current_out.plus(out, now, half_life)

    def log_decision(self, entry: dict[str, str]) -> None:
        if len(self._decisions) == self._decisions.maxlen:
            self.decisions_dropped += 1
        self._decisions.append(entry)

    def on_settings_change(self, listener: Callable[[AdaptiveSettings], None]) -> None:
        self._settings_listeners.append(listener)

    # --- background: talk to the store ------------------------------------------------

    def stop(self) -> None:
        """End ``run()`` at its next turn. Cancel its task too: this is for when the
        cancellation is lost in a store's library (see ``policies/bounded.py``)."""
        self._stopping = True

    async def run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                ok = await self.sync_once()
            except Exception:  # a bug here must not end learning for good
                log.exception("policy state sync failed")
                ok = False
            failures = 0 if ok else failures + 1
            delay = self.sync_interval_s if ok else min(5.0, self.sync_interval_s * 2 ** failures)
            await asyncio.sleep(delay)

    async def sync_once(self) -> bool:
        try:
            await self._flush()
            if self.load_provider is not None:
                await self.store.put_replica_load(self.load_provider(), self.load_ttl_s)
            state = await self.store.read_state()
            if state.settings_version < self.settings_version:
                state = await self._reseed(state)
        except StoreUnavailable as e:
            self.last_error = str(e)
            if e.slow and self.store_up and self._slow_in_row < SLOW_SYNCS_TOLERATED:
                # One slow reply on a busy machine is not an outage: retry first.
                self._slow_in_row += 1
                return False
            if self.store_up:
                self.outages += 1
                log.warning("policy store unavailable, deciding from local state: %s", e)
            self.store_up = False
            self.last_error = str(e)
            return False
        self._slow_in_row = 0
        self._remote = state
        self._apply_settings(state)
        if not self.store_up:
            log.info("policy store back; local observations flushed and state re-read")
        self.store_up = True
        self.last_error = None
        self.last_sync_at = self.clock()
        return True

    async def _reseed(self, state: StoreState) -> StoreState:
        """The store lost its data (a Redis restart without persistence): one replica
        writes back the shared state it last read; the others just read it back."""
        log.warning("policy store was reset (settings version %d < %d); resynchronising",
                    state.settings_version, self.settings_version)
        if await self.store.claim("reseed", ttl_s=30.0):
            half_life = self.settings.acceptance_half_life_s
            for (mode, cls), sums in self._remote.acceptance.items():
                await self.store.add_acceptance(mode, cls, sums, sums.updated_at, half_life)
            for cls, out in self._remote.output_length.items():
                await self.store.add_output_length(cls, out, out.updated_at, half_life)
            self.settings_version = await self.store.put_settings(
                self.settings.model_dump(mode="json"))
        else:
            self.settings_version = state.settings_version
        return await self.store.read_state()

    async def _flush(self) -> None:
        # Move pending to in-flight first: observations made during the awaits
        # below land in a fresh buffer, and the in-flight one is only dropped
        # once the store has the data and it has been read back.
        for key, sums in self._pending.acceptance.items():
            have = self._inflight.acceptance.get(key)
            self._inflight.acceptance[key] = sums if have is None else \
                have.plus(sums, sums.updated_at, self.settings.acceptance_half_life_s)
        for cls, out in self._pending.output_length.items():
            have_out = self._inflight.output_length.get(cls)
            self._inflight.output_length[cls] = out if have_out is None else \
                have_out.plus(out, out.updated_at, self.settings.acceptance_half_life_s)
        self._pending = _Buffers()
        half_life = self.settings.acceptance_half_life_s
        now = self.clock()
        flushed = _Buffers()
        try:
            for (mode, cls), sums in self._inflight.acceptance.items():
                await self.store.add_acceptance(mode, cls, sums, now, half_life)
                flushed.acceptance[(mode, cls)] = sums
            for cls, out in self._inflight.output_length.items():
                await self.store.add_output_length(cls, out, now, half_life)
                flushed.output_length[cls] = out
            if self._decisions:
                batch = list(self._decisions)
                await self.store.log_decisions(batch)
                for _ in batch:
                    self._decisions.popleft()
        finally:
            # What the store acknowledged must not be sent again on the next try.
            for key in flushed.acceptance:
                del self._inflight.acceptance[key]
            for cls in flushed.output_length:
                del self._inflight.output_length[cls]
            self._remote = _merge_acknowledged(self._remote, flushed, now, half_life)

    def _apply_settings(self, state: StoreState) -> None:
        if state.settings is None or state.settings_version == self.settings_version:
            return
        try:
            settings = AdaptiveSettings.model_validate(state.settings)
        except ValidationError:
            log.exception("ignoring invalid policy settings version %d in the store",
                          state.settings_version)
            return
        self.settings = settings
        self.settings_version = state.settings_version
        for listener in self._settings_listeners:
            listener(settings)

    async def update_settings(self, settings: AdaptiveSettings) -> int:
        """Write new settings to the store (raises StoreUnavailable) and apply them."""
        version = await self.store.put_settings(settings.model_dump(mode="json"))
        self.settings = settings
        self.settings_version = version
        for listener in self._settings_listeners:
            listener(settings)
        return version

    def remote_state(self) -> StoreState:
        return self._remote

    def describe(self, now: float) -> dict[str, Any]:
        classes = self.known_classes()
        return {
            "acceptance": {cls: {mode: {"mean_accepted_length": round(a.mean_accepted_length, 4),
                                        "acceptance_rate": round(a.acceptance_rate, 4),
                                        "requests": round(a.requests, 2)}
                                 for mode, a in self.acceptance_for(cls, now).items()}
                           for cls in classes},
            "expected_output_tokens": {cls: self.expected_output(cls, now)
                                       for cls in classes},
            "replicas": {rid: {"at": r.at, "modes": dict(r.modes),
                               "step_profile": dict(r.step_profile)}
                         for rid, r in self._remote.replicas.items()},
            "store": {"up": self.store_up, "last_error": self.last_error,
                      "outages": self.outages, "last_sync_at": self.last_sync_at,
                      "decisions_dropped": self.decisions_dropped},
        }


def _merge_acknowledged(state: StoreState, flushed: _Buffers, now: float,
                        half_life: float) -> StoreState:
    """Count acknowledged data in the local copy of the remote state until the next read."""
    if not flushed.acceptance and not flushed.output_length:
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

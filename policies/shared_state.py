"""The policy's learned state shared through a store: the synchronisation, never
on the request path (what is learned: ``learned.py``; this replica's routing
memory: ``routing_memory.py``).

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
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from policies.adaptive_settings import AdaptiveSettings
from policies.learned import Buffers, LearnedStats
from policies.store.base import PolicyStore, ReplicaLoad, StoreState, StoreUnavailable

log = logging.getLogger(__name__)

LoadProvider = Callable[[], ReplicaLoad]
# Syncs in a row that may fail on a slow reply before the store counts as down.
SLOW_SYNCS_TOLERATED = 1


class AuditRecord(Protocol):
    """A decision for the audit log, rendered when the sync ships it."""

    def as_strings(self) -> dict[str, str]: ...


class SharedPolicyState:
    """The store synchronisation around ``LearnedStats`` (what is learned, read on the
    request path) plus the live settings and the audit log it ships."""

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
        self.learned = LearnedStats(lambda: self.settings.acceptance_half_life_s, max_classes)
        self.load_provider: LoadProvider | None = None
        self.store_up = True
        self._slow_in_row = 0  # syncs in a row that failed on a slow reply
        self.last_error: str | None = None
        self.outages = 0
        self.last_sync_at: float | None = None
        self.decisions_dropped = 0
        self._decisions: deque[AuditRecord] = deque(maxlen=max_buffered_decisions)
        self._settings_listeners: list[Callable[[AdaptiveSettings], None]] = []
        self._stopping = False
        # The request path: local reads and writes, no I/O.
        self.workload_class = self.learned.workload_class
        self.known_classes = self.learned.known_classes
        self.acceptance_for = self.learned.acceptance_for
        self.expected_output = self.learned.expected_output
        self.learned_classes = self.learned.learned_classes
        self.pooled_acceptance = self.learned.pooled_acceptance
        self.observe = self.learned.observe
        self.observe_acceptance = self.learned.observe_acceptance

    def log_decision(self, entry: AuditRecord) -> None:
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
        self.learned.read(state)
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
            for (mode, cls), sums in self.learned.remote.acceptance.items():
                await self.store.add_acceptance(mode, cls, sums, sums.updated_at, half_life)
            for cls, out in self.learned.remote.output_length.items():
                await self.store.add_output_length(cls, out, out.updated_at, half_life)
            self.settings_version = await self.store.put_settings(
                self.settings.model_dump(mode="json"))
        else:
            self.settings_version = state.settings_version
        return await self.store.read_state()

    async def _flush(self) -> None:
        unsent = self.learned.start_sending()
        half_life = self.settings.acceptance_half_life_s
        now = self.clock()
        flushed = Buffers()
        try:
            for (mode, cls), sums in unsent.acceptance.items():
                await self.store.add_acceptance(mode, cls, sums, now, half_life)
                flushed.acceptance[(mode, cls)] = sums
            for cls, out in unsent.output_length.items():
                await self.store.add_output_length(cls, out, now, half_life)
                flushed.output_length[cls] = out
            if self._decisions:
                batch = list(self._decisions)
                await self.store.log_decisions([entry.as_strings() for entry in batch])
                for _ in batch:
                    self._decisions.popleft()
        finally:
            # What the store acknowledged must not be sent again on the next try.
            self.learned.acknowledged(flushed, now)

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
        return self.learned.remote

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
                         for rid, r in self.learned.remote.replicas.items()},
            "store": {"up": self.store_up, "last_error": self.last_error,
                      "outages": self.outages, "last_sync_at": self.last_sync_at,
                      "decisions_dropped": self.decisions_dropped},
        }


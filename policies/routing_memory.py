"""This replica's routing memory: what its own recent auto decisions were.

Hysteresis and switching read it (the last winner per workload class, when each
mode last won, since when each device group's cost leader has led, since when
the mode it holds has deferred a switch). It is local
to the replica that decided, never shared through the store, and kept apart
from the learned statistics (``shared_state.py``), which are shared.
"""

from __future__ import annotations

import math
from typing import Any

MAX_CLASSES = 256


def _decayed(count: float, elapsed: float, memory_s: float) -> float:
    return count * math.exp(-max(elapsed, 0.0) / memory_s) if memory_s > 0 else 0.0


class RoutingMemory:
    def __init__(self) -> None:
        self._previous: dict[str, str] = {}
        self._last_won: dict[str, float] = {}
        self._leading: dict[str, tuple[str, float]] = {}   # device group -> (mode, since)
        self._deferred: dict[str, tuple[str, float]] = {}  # device group -> (held, since)
        self._wins = 0
        # device group -> (time-averaged batch, when last noted, batch since then)
        self._load: dict[str, tuple[float, float, int]] = {}
        # workload class -> (decayed count of auto requests, when last noted)
        self._arrivals: dict[str, tuple[float, float]] = {}

    def previous_mode(self, workload_class: str) -> str | None:
        return self._previous.get(workload_class)

    def remember(self, workload_class: str, mode: str) -> None:
        """``mode`` won an auto decision for ``workload_class``."""
        self._previous[workload_class] = mode
        self._wins += 1
        self._last_won[mode] = self._wins

    def note_leader(self, group: str, mode: str, now: float) -> None:
        """Record the cost leader a decision saw in ``group``: a new leader starts its
        lead now, the same one keeps the time it took the lead."""
        current = self._leading.get(group)
        if current is None or current[0] != mode:
            self._leading[group] = (mode, now)

    def leading_since(self) -> dict[str, float]:
        """Since when each device group's cost leader has led (mode -> time)."""
        return {mode: since for mode, since in self._leading.values()}

    def note_deferred(self, group: str, mode: str, now: float) -> None:
        """``mode`` was held in ``group`` although a mode led it by more than the
        margin: its deferral runs from the first such hold until ``clear_deferred``,
        whichever mode leads meanwhile. Two modes level with each other and both
        ahead of the held one trade the lead back and forth; a clock per leader
        would start over at each trade and never see how long a switch has waited."""
        current = self._deferred.get(group)
        if current is None or current[0] != mode:
            self._deferred[group] = (mode, now)

    def clear_deferred(self, group: str) -> None:
        """``group`` served its cost leader: no switch is waiting there."""
        self._deferred.pop(group, None)

    def deferred_since(self) -> dict[str, float]:
        """Since when each device group's held mode has deferred a switch (mode -> time)."""
        return {mode: since for mode, since in self._deferred.values()}

    def note_batch(self, group: str, batch: int, now: float, memory_s: float) -> None:
        """``group`` holds ``batch`` requests from ``now`` on: the batch since the last
        note joins its average with weight ``1 - exp(-elapsed / memory_s)``."""
        self._load[group] = (self._average(group, now, memory_s), now, batch)

    def recent_batch(self, now: float, memory_s: float) -> dict[str, float]:
        """Each device group's batch averaged over about the last ``memory_s``
        (group -> requests), like a load average: a group that held eight requests
        a moment ago and none now reads about eight."""
        return {group: self._average(group, now, memory_s) for group in self._load}

    def _average(self, group: str, now: float, memory_s: float) -> float:
        known = self._load.get(group)
        if known is None:
            return 0.0
        if memory_s <= 0:
            return 0.0      # no memory: the batch now (which the policy counts itself)
        average, since, batch = known
        keep = math.exp(-max(now - since, 0.0) / memory_s)
        return keep * average + (1.0 - keep) * batch

    def note_arrival(self, workload_class: str, now: float, memory_s: float) -> None:
        """An auto request of ``workload_class`` arrived: it counts one, and every
        count decays by ``exp(-elapsed / memory_s)``."""
        count, since = self._arrivals.get(workload_class, (0.0, now))
        self._arrivals[workload_class] = (_decayed(count, now - since, memory_s) + 1.0, now)
        if len(self._arrivals) > MAX_CLASSES:      # forget the faintest
            faintest = min(self._arrivals, key=lambda c: _decayed(
                self._arrivals[c][0], now - self._arrivals[c][1], memory_s))
            del self._arrivals[faintest]

    def recent_arrivals(self, now: float, memory_s: float) -> dict[str, float]:
        """The auto requests of each class that arrived over about the last
        ``memory_s`` (class -> decayed count): what traffic is made of now."""
        return {cls: _decayed(count, now - since, memory_s)
                for cls, (count, since) in self._arrivals.items()}

    def last_won(self) -> dict[str, float]:
        """When each mode last won an auto decision, as a sequence number."""
        return dict(self._last_won)

    def describe(self) -> dict[str, Any]:
        return {"previous_winner": dict(self._previous)}

"""In-process policy store: the embedded default, for one gateway process."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policies.store.base import (
    AcceptanceSums,
    OutputLengthSums,
    PolicyStore,
    ReplicaLoad,
    StoreState,
)


class MemoryStore(PolicyStore):
    def __init__(self, *, max_decisions: int = 10_000,
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._acceptance: dict[tuple[str, str], AcceptanceSums] = {}
        self._output: dict[str, OutputLengthSums] = {}
        self._loads: dict[str, tuple[float, ReplicaLoad]] = {}   # id -> (expires at, load)
        self._settings: dict[str, Any] | None = None
        self._version = 0
        self._decisions: deque[dict[str, str]] = deque(maxlen=max_decisions)
        self._claims: dict[str, float] = {}

    async def add_acceptance(self, mode: str, workload_class: str, sums: AcceptanceSums,
                             now: float, half_life_s: float) -> None:
        key = (mode, workload_class)
        stored = self._acceptance.get(key, AcceptanceSums(updated_at=now))
        self._acceptance[key] = stored.plus(sums, max(now, stored.updated_at), half_life_s)

    async def add_output_length(self, workload_class: str, sums: OutputLengthSums,
                                now: float, half_life_s: float) -> None:
        stored = self._output.get(workload_class, OutputLengthSums(updated_at=now))
        self._output[workload_class] = stored.plus(sums, max(now, stored.updated_at),
                                                   half_life_s)

    async def put_replica_load(self, load: ReplicaLoad, ttl_s: float) -> None:
        self._loads[load.replica_id] = (self.clock() + ttl_s, load)

    async def put_settings(self, settings: Mapping[str, Any]) -> int:
        self._settings = dict(settings)
        self._version += 1
        return self._version

    async def settings_version(self) -> int:
        return self._version

    async def log_decisions(self, entries: Sequence[Mapping[str, str]]) -> None:
        self._decisions.extend(dict(e) for e in entries)

    async def recent_decisions(self, count: int) -> list[dict[str, str]]:
        return list(self._decisions)[-count:] if count > 0 else []

    async def read_state(self) -> StoreState:
        now = self.clock()
        self._loads = {rid: (exp, load) for rid, (exp, load) in self._loads.items() if exp > now}
        return StoreState(dict(self._acceptance), dict(self._output),
                          {rid: load for rid, (_, load) in self._loads.items()},
                          dict(self._settings) if self._settings is not None else None,
                          self._version)

    async def claim(self, name: str, ttl_s: float) -> bool:
        now = self.clock()
        if self._claims.get(name, 0.0) > now:
            return False
        self._claims[name] = now + ttl_s
        return True

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None

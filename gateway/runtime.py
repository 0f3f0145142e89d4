"""What the app holds at run time, and its start-up sequence.

Start-up runs in the background so that ``/health`` answers (and ``/ready``
says 503 with details) while the model is prepared and engines load, which
takes minutes; requests that arrive before their engine is up get a clear 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from engines.base import Engine
from engines.supervisor import EngineSupervisor
from engines.tokenizer import Tokenizer
from gateway.admission import Admission, shutting_down
from gateway.chat.service import ChatService
from gateway.completions.service import CompletionService
from gateway.dispatch import CompletionObserver, Dispatcher, ModeInfo, Routing
from gateway.serving import Limits
from policies.base import Policy
from policies.bounded import stop_tasks
from policies.shared_state import SharedPolicyState
from policies.store.base import ReplicaLoad
from service.errors import Unavailable

log = logging.getLogger(__name__)

# How long the cancelled engine supervisor may take to end at shutdown.
STOP_SUPERVISOR_S = 5.0


@dataclass(frozen=True)
class Components:
    """Everything a model needs to be served; engines may not be started yet."""

    model_name: str
    tokenizer: Tokenizer
    engines: Mapping[str, Engine]
    max_model_len: int
    mode_info: Mapping[str, ModeInfo] = field(default_factory=dict)
    # Shared resources to release after the engines (e.g. the remote engines' client).
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


@dataclass(frozen=True)
class Services:
    dispatcher: Dispatcher
    chat: ChatService
    completions: CompletionService


ComponentsLoader = Callable[[], Awaitable[Components]]


class Runtime:
    def __init__(self, model_name: str, policy: Policy, state: SharedPolicyState, max_n: int,
                 load: ComponentsLoader, *, admission: Admission | None = None,
                 request_timeout_s: float = 0.0, keepalive_s: float = 0.0) -> None:
        self.model_name = model_name
        self.state = state
        self.created = int(time.time())
        self.policy = policy
        self.max_n = max_n
        self.admission = admission or Admission()
        self.request_timeout_s = request_timeout_s
        self.keepalive_s = keepalive_s
        self._load = load
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.engines: Mapping[str, Engine] = {}
        self._services: Services | None = None
        self.phase = "starting"
        self.error: str | None = None
        self.completion_observers: list[CompletionObserver] = []
        self.decision_observers: list[Callable[[Routing], None]] = []
        self.stream_error_observers: list[Callable[[str, str | None], None]] = []
        # Called with (mode, restarted) after each attempt to bring back a dead engine.
        self.restart_observers: list[Callable[[str, bool], None]] = []
        self._supervisor: asyncio.Task[None] | None = None

    def services(self) -> Services:
        if self.admission.closed:
            raise shutting_down()
        if self._services is None:
            if self.error is not None:
                raise Unavailable("the gateway failed to start; see its log",
                                  code="startup_failed")
            raise Unavailable("the gateway is starting; retry in a few seconds",
                              code="starting")
        return self._services

    @property
    def ready(self) -> bool:
        return (self.phase == "ready" and not self.admission.closed
                and all(e.is_up for e in self.engines.values()))

    async def boot(self) -> None:
        try:
            components = await self._load()
            self.engines = components.engines
            self._closers = list(components.closers)
            limits = Limits(max_model_len=components.max_model_len, max_n=self.max_n,
                            request_timeout_s=self.request_timeout_s,
                            keepalive_s=self.keepalive_s)
            dispatcher = Dispatcher(components.engines, self.policy, self.state,
                                    components.mode_info, observers=self.completion_observers,
                                    decision_observers=self.decision_observers,
                                    admission=self.admission)
            self.state.load_provider = lambda: self.replica_load(dispatcher)
            chat = ChatService(dispatcher, self.model_name, limits, components.tokenizer)
            completions = CompletionService(dispatcher, self.model_name, limits,
                                            components.tokenizer)
            for service in (chat, completions):
                service.stream_error_observers.extend(self.stream_error_observers)
            self._services = Services(dispatcher=dispatcher, chat=chat, completions=completions)
            # One at a time: each vLLM engine sizes itself against the memory
            # that is free when it starts.
            for name, engine in components.engines.items():
                self.phase = f"starting engine {name}"
                log.info("starting engine %r ...", name)
                began = time.monotonic()
                await engine.start()
                log.info("engine %r up in %.1f s", name, time.monotonic() - began)
            self.phase = "ready"
            # Only once every engine started: before that, "not up" means "starting".
            supervisor = EngineSupervisor(components.engines,
                                          observers=self.restart_observers)
            self._supervisor = asyncio.create_task(supervisor.run())
            log.info("all %d engines up; ready", len(components.engines))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.phase = "failed"
            self.error = f"{type(e).__name__}: {e}"
            log.exception("start-up failed")

    def replica_load(self, dispatcher: Dispatcher) -> ReplicaLoad:
        modes = {}
        profiles = {}
        for name, engine in self.engines.items():
            s = engine.stats()
            modes[name] = {"up": float(s.up), "running": float(s.running),
                           "waiting": float(s.waiting), "in_flight": float(s.in_flight),
                           "kv_cache_usage": s.kv_cache_usage}
            profiles[name] = {str(b): [sec, float(n)] for b, sec, n in s.step_profile}
        return ReplicaLoad(self.state.replica_id, time.time(), modes, profiles)

    @property
    def dispatcher(self) -> Dispatcher | None:
        return self._services.dispatcher if self._services is not None else None

    async def shutdown(self) -> None:
        if self._supervisor is not None:
            await stop_tasks([self._supervisor], STOP_SUPERVISOR_S, "engine supervisor")
        for name, engine in self.engines.items():
            try:
                await engine.shutdown()
            except Exception:
                log.exception("engine %r did not shut down cleanly", name)
        for close in self._closers:
            await close()

"""The engine contract every backend implements.

Streaming contract of :meth:`Engine.generate`:

* it yields zero or more :class:`TextDelta` events, in order per choice, then
  exactly one terminal event: :class:`Finished` on success or
  :class:`Failed` when the engine could not complete the request;
* closing the iterator early (``aclose()``, or cancelling the task that drives
  it) aborts the request inside the engine, so nothing keeps decoding for a
  client that is gone;
* it raises :class:`EngineUnavailable` before yielding anything when the
  engine is not started or is down, and :class:`InvalidGenerationRequest`
  when the engine refuses the request's parameters.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from engines.capabilities import ALL, Capabilities
from engines.events import GenerationEvent
from engines.request import GenerationRequest
from engines.stats import EngineStats


class EngineError(Exception):
    """Base class of the errors an engine raises to its caller."""


class EngineUnavailable(EngineError):
    """The engine is not started, is shutting down, or has died."""


class InvalidGenerationRequest(EngineError):
    """The engine refused the request's parameters; the caller's fault."""


class Engine(ABC):
    """One decoding method served by one engine (in-process or remote)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    @abstractmethod
    async def start(self) -> None:
        """Load the model and become ready; idempotent."""

    @abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Stream the events of one request (see the module docstring)."""

    @abstractmethod
    async def abort(self, request_id: str) -> None:
        """Stop a running request; unknown or finished ids are ignored."""

    @abstractmethod
    def stats(self) -> EngineStats:
        """Live load and speculative-decoding counters; cheap, no I/O."""

    @abstractmethod
    async def shutdown(self) -> None:
        """Release the engine; idempotent."""

    @property
    @abstractmethod
    def is_up(self) -> bool:
        """True once started and while able to serve."""

    @property
    def capabilities(self) -> Capabilities:
        """The request fields this engine cannot serve (``engines/capabilities.py``)."""
        return ALL

    @property
    def restartable(self) -> bool:
        """Whether ``shutdown`` then ``start`` can bring this engine back after it died.

        In-process engines can; a remote server's life is not ours to manage
        (its orchestrator restarts it, and ``is_up`` follows it back)."""
        return False

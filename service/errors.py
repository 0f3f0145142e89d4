"""Why a request cannot be served, typed; ``gateway/errors.py`` maps each to HTTP.

Every error carries a message a caller can act on, the request field it is
about (``param``) and a stable ``code``. None of them knows about HTTP.
"""

from __future__ import annotations


class ServiceError(Exception):
    def __init__(self, message: str, *, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(ServiceError):
    """The request cannot be served as asked; sending it again will not help."""


class InvalidSetting(ServiceError):
    """An operator's setting is refused (out of range, unknown name)."""


class ModelNotFound(ServiceError):
    """The request names a model this server does not serve."""


class AtCapacity(ServiceError):
    """Too many requests in flight (in total or for the forced mode); retry shortly."""


class Unavailable(ServiceError):
    """Nothing can serve the request right now (an engine down, shutting down); retry."""


class EngineFailed(ServiceError):
    """An engine failed a request it had accepted. ``retryable``: a retry may succeed
    (the engine died or its stream broke, and it is being restarted)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message, code="engine_failed")
        self.retryable = retryable


class TimedOut(ServiceError):
    """The request did not finish within the server's time limit and was stopped."""

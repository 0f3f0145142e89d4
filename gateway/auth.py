"""API keys on ``/v1/*`` (and on the operational endpoints an operator protects).

A pure ASGI middleware, not a FastAPI dependency: FastAPI reads and parses
the body before any dependency runs, so a dependency would let a caller with
no key make the gateway buffer and validate bodies, and learn from the 400s
what the API accepts. Here the key is checked on the headers alone, before a
byte of the body is read.

The 401s follow OpenAI's: the envelope with ``authentication_error``,
``WWW-Authenticate: Bearer``, and a message that never echoes the key (OpenAI
shows part of it; we show none). No key is ever logged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import OpenAIError
from service.keys import KeyRing, bearer_token

ErrorCounter = Callable[[str, str | None], None]


def missing_key(what: str = "API key") -> OpenAIError:
    return OpenAIError(
        401, f"You didn't provide an {what}. You need to provide your {what} in an "
             f"Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        type="authentication_error", code=f"missing_{_code(what)}",
        headers={"WWW-Authenticate": "Bearer"})


def invalid_key(what: str = "API key") -> OpenAIError:
    return OpenAIError(401, f"Incorrect {what} provided. Check the key sent in the "
                            f"Authorization header.", type="authentication_error",
                       code=f"invalid_{_code(what)}", headers={"WWW-Authenticate": "Bearer"})


def _code(what: str) -> str:
    return what.lower().replace(" ", "_")


def check_bearer(keys: KeyRing, authorization: str | None, what: str = "API key") -> None:
    """Raise the fitting 401 unless ``authorization`` carries one of ``keys``."""
    token = bearer_token(authorization)
    if token is None:
        raise missing_key(what)
    if not keys.accepts(token):
        raise invalid_key(what)


class ApiKeyMiddleware:
    """Requires one of ``keys`` on ``/v1/*`` and on ``protected`` paths; off when empty."""

    def __init__(self, app: ASGIApp, keys: KeyRing, protected: Collection[str],
                 count_error: ErrorCounter) -> None:
        self.app = app
        self.keys = keys
        self.protected = frozenset(protected)
        self.count_error = count_error

    def _needs_key(self, path: str) -> bool:
        return path == "/v1" or path.startswith("/v1/") or path in self.protected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.keys or scope["type"] != "http" or not self._needs_key(scope["path"]):
            await self.app(scope, receive, send)
            return
        authorization = next((value.decode("latin-1") for name, value in scope["headers"]
                              if name == b"authorization"), None)
        try:
            check_bearer(self.keys, authorization)
        except OpenAIError as refused:
            self.count_error(refused.type, refused.code)
            await refused.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

"""The admin key check: constant-time, and off entirely when no key is configured."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.errors import OpenAIError


def require_admin(request: Request,
                  authorization: Annotated[str | None, Header()] = None) -> None:
    key = request.app.state.settings.admin_key
    if key is None:
        raise OpenAIError(404, "the admin API is disabled; set admin_key (SPECGATE_ADMIN_KEY) "
                               "to enable it", type="not_found_error", code="admin_disabled")
    scheme, _, given = (authorization or "").partition(" ")
    # compare_digest on bytes: its time does not depend on where the keys differ.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), key.get_secret_value().encode()):
        raise OpenAIError(401, "missing or invalid admin key (Authorization: Bearer <key>)",
                          type="authentication_error", code="invalid_admin_key",
                          headers={"WWW-Authenticate": "Bearer"})


AdminDep = Annotated[None, Depends(require_admin)]

"""The admin key check: constant-time, and off entirely when no key is configured.

A separate key from the API keys: whoever may generate text must not thereby
be able to retune routing for every replica.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.auth import check_bearer
from gateway.errors import OpenAIError
from service.keys import KeyRing


def require_admin(request: Request,
                  authorization: Annotated[str | None, Header()] = None) -> None:
    keys: KeyRing = request.app.state.admin_keys
    if not keys:
        raise OpenAIError(404, "the admin API is disabled; set admin_key (SPECGATE_ADMIN_KEY) "
                               "to enable it", type="not_found_error", code="admin_disabled")
    check_bearer(keys, authorization, what="admin key")


AdminDep = Annotated[None, Depends(require_admin)]

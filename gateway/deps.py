"""Typed dependencies: handlers declare what they need, the app state supplies it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SpecModeHeader = Annotated[str | None, Header(alias="x-spec-mode")]

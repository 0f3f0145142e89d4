"""Typed dependencies: handlers declare what they need, the app state supplies it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from gateway.errors import bad_request
from service.runtime import Runtime
from service.serving import RoutingHeaders


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def get_routing_headers(
    request: Request,
    x_spec_mode: Annotated[str | None, Header(alias="x-spec-mode")] = None,
    x_workload_class: Annotated[str | None, Header(alias="x-workload-class")] = None,
) -> RoutingHeaders:
    # Repeated, these would mean whatever each hop picks (the first, the last,
    # both joined); refuse the ambiguity instead of routing on a guess.
    for name in ("x-spec-mode", "x-workload-class"):
        if len(request.headers.getlist(name)) > 1:
            raise bad_request(f"send the {name} header at most once", param=name,
                              code="duplicate_header")
    return RoutingHeaders(spec_mode=x_spec_mode, workload_class=x_workload_class)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
RoutingHeadersDep = Annotated[RoutingHeaders, Depends(get_routing_headers)]

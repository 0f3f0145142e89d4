"""The routing a request asks for in its headers and body, validated.

``x-spec-mode`` forces a mode (``auto`` or absent: the policy chooses);
``x-workload-class`` labels the request's kind of traffic and wins over the
body's ``metadata.workload_class``. A bad value is a 400 naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from service.errors import InvalidRequest
from service.settings import AUTO

_CLASS_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True, slots=True)
class RouteHints:
    """What a request asks of routing: a forced mode (None: auto) and its workload class."""

    forced: str | None = None
    workload_class: str | None = None


def route_hints(spec_mode: str | None, header_class: str | None, metadata_class: str | None,
                modes: Collection[str]) -> RouteHints:
    return RouteHints(forced_mode(spec_mode, modes),
                      workload_class(header_class, "x-workload-class")
                      or workload_class(metadata_class, "metadata.workload_class"))


def forced_mode(header: str | None, modes: Collection[str]) -> str | None:
    """The mode named by ``x-spec-mode``; None for auto."""
    if header is None:
        return None
    value = header.strip().lower()
    if value in ("", AUTO):
        return None
    if value not in modes:
        shown = repr(header) if header.isprintable() and len(header) <= 64 \
            else repr(header[:64]) + ("..." if len(header) > 64 else "")
        raise InvalidRequest(
            f"unknown x-spec-mode {shown}; valid values: " + ", ".join([AUTO, *sorted(modes)]),
            param="x-spec-mode", code="invalid_spec_mode")
    return value


def workload_class(value: str | None, param: str) -> str | None:
    if value is None:
        return None
    if not _CLASS_NAME.match(value):
        raise InvalidRequest(f"{param} must be 1-64 characters of letters, digits and _.:-",
                             param=param, code="invalid_workload_class")
    return value

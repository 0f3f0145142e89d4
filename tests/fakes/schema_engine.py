"""A fake engine that obeys JSON-schema constraints, as constrained decoding would.

Asked for a ``json`` output (a structured-output schema, or the schema of a
``tool_choice`` required / named), it emits a small instance of that schema; asked
for free text, it emits ``FakeEngine``'s words. Client libraries driven against it
(tests/gateway/test_clients_fake.py) then get calls and objects that parse.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from engines.events import TextDelta
from engines.request import GenerationRequest
from tests.fakes.engine import FakeEngine

_SCALARS: dict[str, Any] = {"string": "Paris", "integer": 1, "number": 1.5, "boolean": True,
                            "null": None}


def instance(schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """A small value that satisfies ``schema`` (the subset tools and models use)."""
    if not isinstance(schema, dict):
        return None
    defs = {**(defs or {}), **schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema:
        return instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("const", "enum", "anyOf", "oneOf", "allOf"):
        if key in schema:
            value = schema[key]
            return value if key == "const" else value[0] if key == "enum" else \
                instance(value[0], defs)
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        required = schema.get("required", list(properties))
        return {name: instance(properties[name], defs) for name in required
                if name in properties}
    if kind == "array":
        return [instance(schema.get("items", {}), defs)
                for _ in range(max(1, schema.get("minItems", 1)))]
    return _SCALARS.get(kind)


class SchemaEngine(FakeEngine):
    async def _choice(self, request: GenerationRequest, index: int) -> AsyncIterator[TextDelta]:
        structured = request.sampling.structured
        if structured is None or structured.kind != "json":
            async for delta in super()._choice(request, index):
                yield delta
            return
        reply = json.dumps(instance(json.loads(structured.spec)))
        async for delta in self._reply(request, index, reply):
            yield delta

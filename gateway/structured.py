"""Structured output on the wire: OpenAI's ``response_format`` and vLLM's
``structured_outputs``, validated at the edge and turned into one engine constraint.

As in vLLM's server, a ``response_format`` other than text sets the kind of
constraint (it wins over a kind given in ``structured_outputs``, whose options
still apply). A schema the engine's grammar compiler cannot take is refused by
the engine before any token is generated, and that is a 400 too.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from engines.request import ConstraintKind, StructuredOutput
from gateway.wire_types import Name, Text, WireModel


class JsonSchemaFormat(WireModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True,
                              populate_by_name=True)

    name: Name
    description: Text | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("'json_schema' is required when type is 'json_schema'")
        return self


class StructuredOutputs(WireModel):
    """vLLM's ``structured_outputs``: exactly one kind of constraint, and its options."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True,
                              populate_by_name=True)

    json_: dict[str, Any] | Text | None = Field(None, alias="json")
    regex: Text | None = None
    choice: list[Text] | None = Field(None, min_length=1, max_length=1024)
    grammar: Text | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Text | None = None

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> StructuredOutputs:
        kinds = self.kinds()
        if len(kinds) > 1:
            raise ValueError(f"give one kind of constraint, not {len(kinds)} "
                             f"({', '.join(kinds)})")
        return self

    def kinds(self) -> list[ConstraintKind]:
        given: list[tuple[ConstraintKind, bool]] = [
            ("json", self.json_ is not None), ("regex", self.regex is not None),
            ("choice", self.choice is not None), ("grammar", self.grammar is not None),
            ("json_object", bool(self.json_object))]
        return [kind for kind, present in given if present]


def constraint(response_format: ResponseFormat | None,
               options: StructuredOutputs | None) -> StructuredOutput | None:
    """The request's output constraint, or None when it asks for free text."""
    kind: ConstraintKind | None = None
    spec = ""
    if response_format is not None and response_format.type == "json_object":
        kind = "json_object"
    elif response_format is not None and response_format.type == "json_schema":
        schema = response_format.json_schema
        assert schema is not None
        kind, spec = "json", json.dumps(schema.json_schema or {})
    elif options is not None and options.kinds():
        kind = options.kinds()[0]
        spec = _spec(options, kind)
    if kind is None:
        return None
    return StructuredOutput(
        kind, spec,
        disable_any_whitespace=bool(options and options.disable_any_whitespace),
        disable_additional_properties=bool(options and options.disable_additional_properties),
        whitespace_pattern=options.whitespace_pattern if options else None)


def _spec(o: StructuredOutputs, kind: ConstraintKind) -> str:
    if kind == "json":
        return o.json_ if isinstance(o.json_, str) else json.dumps(o.json_)
    if kind == "choice":
        return json.dumps(o.choice)
    if kind == "regex":
        return o.regex or ""
    if kind == "grammar":
        return o.grammar or ""
    return ""

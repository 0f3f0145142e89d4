"""The Responses request model on its own: its documented fields, its constraint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from engines.request import StructuredOutput
from gateway.responses.protocol import REFUSED, ResponsesRequest

ROOT = Path(__file__).resolve().parents[2]


def test_docs_name_every_field() -> None:
    doc = (ROOT / "docs" / "api-fields.md").read_text()
    section = doc.split("## `POST /v1/responses`", 1)[1]
    named = {name.split(".")[0] for name in re.findall(r"`([a-z_.]+)`", section)}
    fields = {f.alias or name for name, f in ResponsesRequest.model_fields.items()}
    missing = sorted((fields | set(REFUSED)) - named)
    assert not missing, f"docs/api-fields.md's Responses section does not name {missing}"


def request(**fields: object) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})


def test_text_format_wins_over_structured_outputs_kind() -> None:
    schema = {"type": "object"}
    wire = request(text={"format": {"type": "json_schema", "name": "x", "schema": schema}},
                   structured_outputs={"regex": "a+", "disable_any_whitespace": True})
    assert wire.constraint() == StructuredOutput("json", json.dumps(schema),
                                                 disable_any_whitespace=True)
    assert request(structured_outputs={"choice": ["a", "b"]}).constraint() == \
        StructuredOutput("choice", '["a", "b"]')
    assert request().constraint() is None


@pytest.mark.parametrize("fields", [
    {"text": {"format": {"type": "json_schema", "name": "x", "json_schema": {}}}},
    {"stop": ["a", "b", "c", "d", "e"]},
    {"input": [{"role": "user", "content": "hi", "type": "input_text"}]},
])
def test_refused_shapes(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        request(**fields)


def test_neutral_values_of_refused_fields_are_accepted() -> None:
    wire = request(store=False, background=False, previous_response_id=None,
                   truncation="disabled", top_logprobs=0, tools=[], tool_choice="auto")
    assert wire.n == 1 and wire.stop_tuple() == ()

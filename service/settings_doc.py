"""docs/configuration.md, written from the settings models themselves.

Every setting once: its YAML path, its environment variable, its default and
its description, read off the pydantic fields, so the reference cannot drift
from the code (``tests/service/test_settings_doc.py`` compares the file with
this output). ``specgate config markdown > docs/configuration.md`` rewrites it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from policies.adaptive_settings import MethodPrior
from service.settings import ModeSettings, Settings

ENV_PREFIX = "SPECGATE_"
HOME = str(Path.home())

HEADER = """# Configuration

Generated from the settings models (`service/settings.py`,
`policies/adaptive_settings.py`) by `specgate config markdown`; a test fails when
this file and the code disagree. Do not edit by hand.

Settings come from, lowest to highest: the defaults below, the YAML file given
by `--config` or `SPECGATE_CONFIG`, `SPECGATE_*` environment variables (nested
fields joined by `__`; lists and maps as JSON; `api_keys` and
`public_endpoints` also as comma-separated lists), then the command line's flags.
A key that is not listed here is refused at start-up, naming the field.
`specgate config check FILE` prints the settings a file resolves to.

The adaptive policy's settings (`policy.adaptive.*`) are the initial live
settings: once the shared store holds settings (`PUT /admin/policy`), those win
on every replica.
"""


def settings_markdown() -> str:
    lines = [HEADER, "## Gateway", "", *_table(Settings, "", env=True), "",
             "## Modes (`modes.<name>.*`)", "",
             "Absent `modes`: the embedded default set (`standard`, `ngram`, `eagle3`, "
             "`dflash`), or `standard` alone for a model of your own. Set them in the "
             "YAML file, or as JSON in `SPECGATE_MODES`. Keys not listed here go to vLLM's "
             "`speculative_config` unchanged (`prompt_lookup_max`, ...).", "",
             *_table(ModeSettings, "modes.<name>.", env=False), "",
             "## Method priors (`policy.adaptive.priors.<method>.*`)", "",
             *_table(MethodPrior, "policy.adaptive.priors.<method>.", env=False), ""]
    return "\n".join(lines)


def _table(model: type[BaseModel], prefix: str, *, env: bool) -> list[str]:
    head = "| setting | environment | default | description |" if env \
        else "| setting | default | description |"
    rows = [head, "|---|---|---|---|" if env else "|---|---|---|"]
    for path, info in _fields(model, prefix):
        cells = [f"`{path}`"]
        if env:
            cells.append(_env_name(path))
        cells += [_default(info), _cell(_description(info))]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        nested = _model_of(info.annotation)
        if nested is not None and not _is_map(info.annotation):
            yield from _fields(nested, path + ".")
        else:
            yield path, info


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _is_map(annotation: Any) -> bool:
    return get_origin(annotation) is dict or any(get_origin(a) is dict
                                                 for a in get_args(annotation))


def _description(info: FieldInfo) -> str:
    text = info.description or ""
    choices = next((get_args(a) for a in (info.annotation, *get_args(info.annotation))
                    if get_origin(a) is Literal), None)
    if choices:
        text += ("; " if text else "") + "one of " + ", ".join(f"`{c}`" for c in choices)
    return text


def _env_name(path: str) -> str:
    return f"`{ENV_PREFIX}{path.replace('.', '__').upper()}`"


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "absent"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict) and value and all(isinstance(v, BaseModel)
                                                 for v in value.values()):
        value = {k: v.model_dump(mode="json") for k, v in value.items()}
    if isinstance(value, Path):
        value = str(value).replace(HOME, "~", 1)
    text = json.dumps(value, default=str, separators=(", ", ": ")) \
        if not isinstance(value, str) else value
    return _cell(f"`{text}`")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")

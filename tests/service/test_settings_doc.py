"""The settings reference is generated from the code, and every settings example in
the README and docs loads: a renamed or moved setting fails here, not in a user's
hands."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gateway.cli import main
from service.settings import ModeSettings, Settings
from service.settings_doc import settings_markdown

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# SPECGATE_* variables that are not settings: the compose file's model folder and
# the drafter trainer's precision switch.
NOT_SETTINGS = {"SPECGATE_MODELS_DIR": ROOT / "deploy" / "compose.yaml",
                "SPECGATE_TRAIN_BF16": ROOT / "training" / "device.py"}
ENV_EXAMPLE = re.compile(r"\b(SPECGATE_[A-Z0-9_]+)=([^\s`'\"|)]+)")
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)


def test_the_reference_is_what_the_settings_models_say() -> None:
    assert REFERENCE.read_text() == settings_markdown(), \
        "docs/configuration.md is stale: run `specgate config markdown > docs/configuration.md`"


def test_the_command_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    main(["config", "markdown"])
    assert capsys.readouterr().out == settings_markdown()


def test_the_reference_tells_a_changed_default() -> None:
    """What the drift test rests on: a default, a description or a new field shows."""
    text = settings_markdown()
    assert "| `port` | `SPECGATE_PORT` | `8000` |" in text
    row = "| `policy.rule.max_batch_for_speculation` | " \
          "`SPECGATE_POLICY__RULE__MAX_BATCH_FOR_SPECULATION` | `32` |"
    assert row in text
    assert "`policy.adaptive.hysteresis`" in text and "`modes.<name>.url`" in text


def _examples() -> list[tuple[str, str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        found += [(where, "env", f"{m[1]}={m[2]}") for m in ENV_EXAMPLE.finditer(text)]
        found += [(where, "yaml", m[1]) for m in YAML_BLOCK.finditer(text)]
    return found


@pytest.mark.parametrize(("where", "kind", "example"), _examples(),
                         ids=lambda v: str(v)[:40])
def test_every_settings_example_in_the_docs_loads(
        where: str, kind: str, example: str, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    if kind == "env":
        name, value = example.split("=", 1)
        if name in NOT_SETTINGS:
            assert name in NOT_SETTINGS[name].read_text()
            return
        if "%" in value or "$" in value:   # a shell template, not a value
            value = "x" * 40
        if name.endswith("_FILE") and not (ROOT / value).exists():   # made at deploy time
            (tmp_path / "keys").write_text("x" * 40 + "\n")
            value = str(tmp_path / "keys")
        monkeypatch.setenv(name, value)
        try:
            Settings()
        except ValidationError as e:
            pytest.fail(f"{where}: {example} is refused: {e}")
        assert _read_by_settings(name), f"{where}: {name} is not a setting"
        return
    data = yaml.safe_load(example)
    if not isinstance(data, dict):
        return
    fields = set(Settings.model_fields)
    if set(data) & fields:
        assert set(data) <= fields, f"{where}: not settings: {sorted(set(data) - fields)}"
        try:
            Settings(**data)
        except ValidationError as e:
            pytest.fail(f"{where}: the example is refused: {e}")
    elif all(isinstance(v, dict) and ("method" in v or "url" in v) for v in data.values()):
        for mode in data.values():   # a fragment of `modes:`
            ModeSettings(**mode)


def _read_by_settings(env_name: str) -> bool:
    """Whether ``env_name`` names a settings field (nested with ``__``)."""
    parts = env_name.removeprefix("SPECGATE_").lower().split("__")
    model: Any = Settings
    for part in parts:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        model = fields[part].annotation
    return True

"""One settings object: defaults < config file < SPECGATE_* env < CLI flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.cli import _parser, load_settings
from service.settings import Settings


def test_defaults_are_the_embedded_cpu_set() -> None:
    s = Settings()
    assert (s.host, s.port, s.model) == ("127.0.0.1", 8000, None)
    assert list(s.resolved_modes()) == ["standard", "ngram", "eagle3", "dflash"]
    assert s.resolved_modes()["standard"].speculative_config() is None
    assert s.resolved_modes()["ngram"].speculative_config() == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
        "prompt_lookup_min": 2}


def test_hardening_defaults() -> None:
    s = Settings()
    assert (s.api_keys, s.api_keys_file, s.resolved_api_keys()) == ([], None, [])
    assert s.public_endpoints == ["/health", "/ready", "/metrics"]
    assert s.max_body_bytes == 4 * 1024 * 1024
    assert (s.max_in_flight_per_mode, s.max_in_flight) == (256, 1024)
    assert (s.request_timeout_s, s.sse_keepalive_s, s.drain_timeout_s) == (600, 15, 30)


def test_hardening_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in [("MAX_BODY_BYTES", "2048"), ("MAX_IN_FLIGHT_PER_MODE", "4"),
                        ("MAX_IN_FLIGHT", "0"), ("REQUEST_TIMEOUT_S", "30"),
                        ("SSE_KEEPALIVE_S", "0"), ("DRAIN_TIMEOUT_S", "5")]:
        monkeypatch.setenv(f"SPECGATE_{name}", value)
    s = Settings()
    assert (s.max_body_bytes, s.max_in_flight_per_mode, s.max_in_flight) == (2048, 4, 0)
    assert (s.request_timeout_s, s.sse_keepalive_s, s.drain_timeout_s) == (30, 0, 5)


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "specgate.yaml"
    config.write_text("port: 9001\nhost: 0.0.0.0\nmodes:\n  standard: {}\n"
                      "  eagle3: {method: eagle3, model: /d/eagle, num_speculative_tokens: 3}\n"
                      "policy:\n  rule:\n    max_batch_for_speculation: 16\n")
    monkeypatch.setenv("SPECGATE_PORT", "9002")
    monkeypatch.setenv("SPECGATE_POLICY__ADAPTIVE__EXPLORATION_SHARE", "0.1")
    s = load_settings(_parser().parse_args(["serve", "--config", str(config), "--host", "::1"]))
    assert s.host == "::1"               # CLI beats the file
    assert s.port == 9002                # env beats the file
    assert s.policy.rule.max_batch_for_speculation == 16
    assert s.policy.adaptive.exploration_share == 0.1
    assert s.resolved_modes()["eagle3"].speculative_config() == {
        "method": "eagle3", "num_speculative_tokens": 3, "model": "/d/eagle"}


def test_config_from_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("max_n: 3\n")
    monkeypatch.setenv("SPECGATE_CONFIG", str(config))
    assert Settings().max_n == 3


@pytest.mark.parametrize("bad", [
    {"port": 0},
    {"modes": {}},
    {"modes": {"auto": {}}},
    {"modes": {"Bad Name": {}}},
    {"modes": {"x": {"model": "/d"}}},
    {"modes": {"x": {"method": "eagle3"}}},
    {"policy": {"rule": {"dflash_min_acceptance": 2}}},
    {"policy": {"adaptive": {"exploration_share": 0.9}}},
    {"policy": {"name": "magic"}},
    {"policy": {"unknown_knob": 1}},
    {"not_a_setting": 1},
    {"max_body_bytes": 10},
    {"max_in_flight": -1},
    {"request_timeout_s": -1},
    {"api_keys": ["short"]},
    # vLLM's per-batch K table: refused at load, not at engine start.
    {"modes": {"x": {"num_speculative_tokens_per_batch_size": [[1, 4, 2]]}}},
    {"modes": {"x": {"method": "eagle3", "num_speculative_tokens": 3,
                     "num_speculative_tokens_per_batch_size": [[2, 4, 2]]}}},
    {"modes": {"x": {"method": "eagle3", "num_speculative_tokens": 3,
                     "num_speculative_tokens_per_batch_size": [[1, 4, 2], [4, 8, 0]]}}},
    {"modes": {"x": {"method": "eagle3", "num_speculative_tokens": 3,
                     "num_speculative_tokens_per_batch_size": [[1, 4, -1]]}}},
    {"modes": {"x": {"method": "eagle3", "num_speculative_tokens": 3,
                     "num_speculative_tokens_per_batch_size": [[5, 4, 1]]}}},
    {"modes": {"x": {"method": "eagle3", "num_speculative_tokens": 3,
                     "num_speculative_tokens_per_batch_size": []}}},
])
def test_refuses_bad_values(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Settings(**bad)


def test_a_k_table_reaches_vllm_and_the_policy() -> None:
    mode = Settings(modes={"eagle3_k": {
        "method": "eagle3", "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[9, 256, 0], [1, 8, 3]]}}).modes["eagle3_k"]
    assert mode.k_schedule() == ((1, 8, 3), (9, 256, 0))
    config = mode.speculative_config()
    assert config is not None
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 8, 3], [9, 256, 0]]


def test_bad_config_file_names_the_field(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("port: -5\n")
    with pytest.raises(SystemExit) as exc:
        load_settings(_parser().parse_args(["serve", "--config", str(config)]))
    assert "port" in str(exc.value.code)
    with pytest.raises(SystemExit) as exc:
        load_settings(_parser().parse_args(["serve", "--config", str(tmp_path / "none.yaml")]))
    assert "not found" in str(exc.value.code)


def test_config_check_prints_resolved_settings_and_masks_secrets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    config = tmp_path / "c.yaml"
    config.write_text("admin_key: topsecret\nmodes:\n  standard: {}\n"
                      "  eagle3: {method: eagle3, model: /m/e, num_speculative_tokens: 3}\n")
    main(["config", "check", str(config)])
    out = capsys.readouterr().out
    assert "topsecret" not in out and "admin_key: '********'" in out
    assert "num_speculative_tokens: 3" in out and "name: adaptive" in out
    config.write_text("modes: {x: {method: eagle3}}\n")
    with pytest.raises(SystemExit) as exc:
        main(["config", "check", str(config)])
    assert "modes.x" in str(exc.value.code) and "num_speculative_tokens" in str(exc.value.code)


def test_tool_call_parser_defaults_to_hermes_for_the_embedded_model_only(
        tmp_path: Path) -> None:
    assert Settings().resolved_tool_call_parser() == "hermes"
    assert Settings(tool_call_parser="none").resolved_tool_call_parser() is None
    own = str(tmp_path)
    assert Settings(model=own).resolved_tool_call_parser() is None
    assert Settings(model=own, tool_call_parser="llama3_json").resolved_tool_call_parser() == \
        "llama3_json"


def test_chat_template_must_be_a_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="chat_template"):
        Settings(chat_template=tmp_path / "missing.jinja")
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    assert Settings(chat_template=template).chat_template == template

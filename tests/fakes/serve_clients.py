"""``python -m tests.fakes.serve_clients PORT``: the gateway with vLLM's hermes tool
parser on engines that obey JSON-schema constraints (``SchemaEngine``), for driving
client libraries (LangChain, the Agents SDK, LiteLLM) without a model."""

from __future__ import annotations

import sys

from engines.tool_calls import ToolCallParser
from gateway.app import create_app
from gateway.shutdown import http_server
from service.runtime import Components
from service.settings import Settings
from tests.conftest import FAKE_MODE_INFO, MODEL
from tests.fakes.engine import FakeTokenizer
from tests.fakes.schema_engine import SchemaEngine


def main() -> None:
    port = int(sys.argv[1])
    tokenizer = FakeTokenizer()
    engines = {mode: SchemaEngine(mode, speculative=mode != "standard")
               for mode in FAKE_MODE_INFO}
    components = Components(model_name=MODEL, tokenizer=tokenizer, engines=engines,
                            max_model_len=16384, mode_info=FAKE_MODE_INFO,
                            tool_parser=ToolCallParser("hermes", tokenizer))
    settings = Settings(policy={"name": "rule"}, host="127.0.0.1", port=port,  # type: ignore[arg-type]
                        log_level="warning")
    http_server(create_app(settings, components=components), settings).run()


if __name__ == "__main__":
    main()

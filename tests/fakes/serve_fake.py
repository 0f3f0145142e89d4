"""``python -m tests.fakes.serve_fake PORT DRAIN_S``: the gateway on fake engines, served
the way ``specgate serve`` serves it (``http_server``), for signal tests."""

from __future__ import annotations

import sys

from gateway.app import create_app
from gateway.shutdown import http_server
from service.runtime import Components
from service.settings import Settings
from tests.conftest import FAKE_MODE_INFO, MODEL, fake_engines
from tests.fakes.engine import FakeTokenizer


def main() -> None:
    port, drain_s = int(sys.argv[1]), float(sys.argv[2])
    components = Components(model_name=MODEL, tokenizer=FakeTokenizer(),
                            engines=fake_engines(token_delay_s=0.05), max_model_len=4096,
                            mode_info=FAKE_MODE_INFO)
    settings = Settings(policy={"name": "rule"}, drain_timeout_s=drain_s,  # type: ignore[arg-type]
                        host="127.0.0.1", port=port, log_level="warning")
    http_server(create_app(settings, components=components), settings).run()


if __name__ == "__main__":
    main()

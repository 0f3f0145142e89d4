"""Client libraries, unchanged, against the real gateway on the embedded model: the
OpenAI Agents SDK (Responses API and chat completions), LangChain's ChatOpenAI and
LiteLLM, each a script in tests/real/clients/ run in their own venv (``make test``
installs ``.venv-clients``). A 135M model decides little by itself, so the scripts
force their tool calls (tool_choice required or named) and bound every string."""

from __future__ import annotations

import pytest

from tests import client_scripts
from tests.real.conftest import RealGateway


@pytest.mark.parametrize("script", client_scripts.SCRIPTS)
def test_client_library_runs_unchanged(real_gateway: RealGateway, script: str) -> None:
    output = client_scripts.run(script, real_gateway.url + "/v1", real_gateway.model,
                                timeout_s=600)
    assert output.rstrip().endswith(": ok"), output[-2000:]

"""The client-library scripts (tests/real/clients/): where they are, the venv that
runs them (``make test`` installs it: ``.venv-clients``), and how to run one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ROOT / "tests" / "real" / "clients"
CLIENTS_VENV = ROOT / os.environ.get("CLIENTS_VENV", ".venv-clients")
SCRIPTS = ("agents_sdk", "langchain_client", "litellm_client")


def python() -> Path:
    """The venv's interpreter; skips when it is not installed."""
    path = CLIENTS_VENV / "bin" / "python"
    if not path.exists():
        pytest.skip(f"the client libraries are not installed in {CLIENTS_VENV} "
                    "(`make .venv-clients/.installed`, or `make test`, installs them)")
    return path


def env(base_url: str, model: str) -> dict[str, str]:
    # LiteLLM would fetch its model price list from GitHub first: use its own copy.
    return {**os.environ, "SPECGATE_BASE_URL": base_url, "SPECGATE_MODEL": model,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONDONTWRITEBYTECODE": "1"}


def command(script: str) -> list[str]:
    return [str(python()), str(CLIENTS / f"{script}.py")]


def run(script: str, base_url: str, model: str, timeout_s: float) -> str:
    """Runs one script to its end; its output, or a failure with the output."""
    done = subprocess.run(command(script), env=env(base_url, model), capture_output=True,
                          text=True, timeout=timeout_s, cwd=CLIENTS, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{output[-4000:]}"
    return output

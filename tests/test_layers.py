"""The layers show in the imports: gateway (HTTP) -> service -> policies, engines.

Every import in every module counts, including those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> module prefixes it must not import
FORBIDDEN = {
    "gateway": ("vllm", "torch", "transformers"),
    "service": ("fastapi", "starlette", "uvicorn", "gateway", "vllm", "sse_starlette"),
    "policies": ("gateway", "service", "engines", "vllm", "fastapi", "starlette"),
    "engines": ("gateway", "service", "policies", "fastapi", "starlette"),
}
# What the gateway may use of the policy layer: its public types and the bounded-await
# helper every layer shares; never the policies, their state or stores.
GATEWAY_POLICY_API = ("policies.base", "policies.store.base", "policies.bounded")


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_upward_or_across(package: str) -> None:
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in imports(path):
            if any(_under(module, bad) for bad in FORBIDDEN[package]):
                wrong.append(f"{path.relative_to(ROOT)}: {module}")
            if package == "gateway" and _under(module, "policies") and \
                    not any(_under(module, ok) for ok in GATEWAY_POLICY_API):
                wrong.append(f"{path.relative_to(ROOT)}: {module} (policy internals)")
    assert wrong == []

"""The layers show in the imports: gateway (HTTP) -> service -> policies, engines.

Beside them: ``sim`` (the serving simulator) runs the policies on modelled
engines; ``training`` trains drafters on ``engines``' embedded model; ``bench``
drives everything from outside, as a client would. Nothing in the product imports
``sim`` or ``bench``, and only the command line reaches ``training``. Every import
in every module counts, including those inside functions; every top-level package
is covered, and the product's modules import no cycle."""

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
    "engines": ("gateway", "service", "policies", "sim", "training", "bench", "fastapi",
                "starlette"),
    "sim": ("gateway", "service", "training", "bench", "vllm", "fastapi", "starlette"),
    "training": ("gateway", "service", "policies", "sim", "bench", "fastapi", "starlette"),
    "bench": (),    # it measures every layer, from outside or in process
}
for _product in ("gateway", "service", "policies"):
    FORBIDDEN[_product] += ("sim", "bench") + (() if _product == "gateway" else ("training",))
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


def test_every_top_level_package_is_covered() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages <= set(FORBIDDEN), f"add {sorted(packages - set(FORBIDDEN))} to FORBIDDEN"


def test_the_product_imports_no_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for package in ("gateway", "service", "policies", "engines"):
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            graph[module] = imports(path)
    edges = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    seen: dict[str, int] = {}     # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        seen[m] = 1
        for d in sorted(edges[m]):
            if seen.get(d) == 1:
                return [*path, m, d]
            if d not in seen and (cycle := visit(d, [*path, m])):
                return cycle
        seen[m] = 2
        return None

    for m in sorted(edges):
        if m not in seen:
            assert (cycle := visit(m, [])) is None, " -> ".join(cycle)

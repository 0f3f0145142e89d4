"""Policies by name: a new policy is a new entry here, not a new branch elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import Policy
from policies.rule import RulePolicy, RuleSettings


def _rule(params: Mapping[str, Any]) -> Policy:
    return RulePolicy(RuleSettings(**params))


def _adaptive(params: Mapping[str, Any]) -> Policy:
    return AdaptivePolicy(AdaptiveSettings.model_validate(params))


POLICY_FACTORIES: Mapping[str, Callable[[Mapping[str, Any]], Policy]] = {
    "rule": _rule, "adaptive": _adaptive}


def build_policy(name: str, params: Mapping[str, Any]) -> Policy:
    try:
        factory = POLICY_FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_FACTORIES)}") from None
    return factory(params)

"""What a request needs of an engine, and what each engine can serve.

A request's *needs* are the request fields it sets to something other than their
neutral value (``top_k``, ``min_p``, ``logprobs``, ...), named as the caller
sent them so that a refusal can say which field is the problem. An engine's
:class:`Capabilities` say which of those it cannot serve and why. Routing only
weighs engines that can serve a request, and a forced mode that cannot serve it
is a 400 naming the field: a request never reaches an engine that would refuse
it, or, worse, fail on it.

The table is declared per decoding method and platform and kept honest by the
real tier (``tests/real/test_sampling_matrix.py``): every field on every mode,
greedy and sampled, streamed and not, must come back 200 or as this table's 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from engines.request import SamplingOptions

# vLLM 0.32 refuses these with any speculative method (``SamplingParams.verify``):
# its rejection sampler applies neither.
SPECULATIVE_REFUSES: Mapping[str, str] = MappingProxyType({
    "min_p": "vLLM's speculative decoding does not apply min_p",
    "logit_bias": "vLLM's speculative decoding does not apply logit_bias",
})
# vLLM 0.32's CPU build fails top-k sampling in its rejection sampler (the top-k mask
# indexes past the vocabulary, or takes the max of an empty batch when a step drafted
# nothing) and the engine core dies with it.
CPU_SPECULATIVE_REFUSES: Mapping[str, str] = MappingProxyType({
    "top_k": "vLLM's speculative decoding on CPU cannot sample with top_k",
})


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Request fields this engine cannot serve, each with the reason."""

    refuses: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def refusal(self, needs: frozenset[str]) -> tuple[str, str] | None:
        """(field, reason) of the first need this engine cannot serve; None if it can."""
        for name in sorted(needs):
            if name in self.refuses:
                return name, self.refuses[name]
        return None

    def serves(self, needs: frozenset[str]) -> bool:
        return not (needs & self.refuses.keys())


ALL = Capabilities()


def for_method(method: str | None, *, cpu: bool = False) -> Capabilities:
    """The capabilities of a vLLM engine running ``method`` (None: plain decoding),
    on vLLM's CPU build when ``cpu``."""
    if method is None:
        return ALL
    return Capabilities(MappingProxyType(
        {**SPECULATIVE_REFUSES, **(CPU_SPECULATIVE_REFUSES if cpu else {})}))


def needs(s: SamplingOptions) -> frozenset[str]:
    """The fields of ``s`` set to something other than their neutral value."""
    sampled = s.temperature > 0.0   # greedy decoding ignores top_p, top_k and min_p
    out = {name for name, asked in (
        ("temperature", sampled),
        ("top_p", sampled and s.top_p < 1.0),
        ("top_k", sampled and s.top_k > 0),
        ("min_p", sampled and s.min_p > 0.0),
        ("seed", s.seed is not None),
        ("n", s.n > 1),
        ("stop", bool(s.stop)),
        ("stop_token_ids", bool(s.stop_token_ids)),
        ("presence_penalty", s.presence_penalty != 0.0),
        ("frequency_penalty", s.frequency_penalty != 0.0),
        ("repetition_penalty", s.repetition_penalty != 1.0),
        ("logprobs", s.logprobs is not None),
        ("min_tokens", s.min_tokens > 0),
        ("ignore_eos", s.ignore_eos),
        ("logit_bias", bool(s.logit_bias)),
        ("allowed_token_ids", s.allowed_token_ids is not None),
        ("bad_words", bool(s.bad_words)),
        ("structured_outputs", s.structured is not None),
    ) if asked}
    return frozenset(out)

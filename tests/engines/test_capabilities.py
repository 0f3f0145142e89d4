"""What a request needs of an engine, and the declared table of what engines serve."""

from __future__ import annotations

from engines.capabilities import ALL, SPECULATIVE_REFUSES, for_method, needs
from engines.request import SamplingOptions


def test_a_request_needs_only_the_fields_it_sets_away_from_neutral() -> None:
    assert needs(SamplingOptions(max_tokens=8, temperature=0.0)) == frozenset()
    assert needs(SamplingOptions(max_tokens=8)) == {"temperature"}   # OpenAI's default: 1
    asked = SamplingOptions(max_tokens=8, temperature=0.7, top_k=5, min_p=0.1, seed=3, n=2,
                            logprobs=0, stop=("x",), min_tokens=2, ignore_eos=True,
                            logit_bias=((1, 2.0),), repetition_penalty=1.1,
                            presence_penalty=0.5, frequency_penalty=0.5, top_p=0.9,
                            stop_token_ids=(2,), allowed_token_ids=(1, 2), bad_words=("a",))
    assert needs(asked) == {
        "temperature", "top_k", "min_p", "seed", "n", "logprobs", "stop", "min_tokens",
        "ignore_eos", "logit_bias", "repetition_penalty", "presence_penalty",
        "frequency_penalty", "top_p", "stop_token_ids", "allowed_token_ids", "bad_words"}
    # Neutral values ask for nothing: top_k 0 / -1 disable it, penalty 1 is neutral;
    # greedy decoding ignores top_k, top_p and min_p, as vLLM does.
    assert needs(SamplingOptions(max_tokens=8, temperature=1.0, top_k=-1,
                                 repetition_penalty=1.0, min_p=0.0)) == {"temperature"}
    assert needs(SamplingOptions(max_tokens=8, temperature=0.0, top_k=5, top_p=0.5,
                                 min_p=0.2)) == frozenset()


def test_speculative_methods_refuse_what_vllm_refuses_and_plain_decoding_nothing() -> None:
    assert for_method(None) is ALL and ALL.serves(frozenset(SPECULATIVE_REFUSES))
    for method in ("eagle3", "dflash", "ngram"):
        caps = for_method(method)
        assert caps.refusal(frozenset({"temperature", "min_p"}))[0] == "min_p"  # type: ignore[index]
        assert caps.refusal(frozenset({"logit_bias", "seed"}))[0] == "logit_bias"  # type: ignore[index]
        assert caps.serves(frozenset({"top_k", "temperature", "seed", "logprobs", "n"}))
        on_cpu = for_method(method, cpu=True)
        assert on_cpu.refusal(frozenset({"top_k", "temperature"}))[0] == "top_k"  # type: ignore[index]
    assert for_method(None, cpu=True).serves(frozenset({"top_k", "min_p", "logit_bias"}))

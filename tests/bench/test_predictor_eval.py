"""The predictor evaluation scores each request from the requests before it only."""

from __future__ import annotations

import pytest

from bench.predictor_eval import Labelled, online_errors
from service.request_class import Asked


def labelled(ngram_tau: float) -> Labelled:
    # 10 drafts of 4 tokens; accepted tokens give the τ asked for.
    return Labelled("w", "p", [1, 2, 3], Asked(),
                    counts={"ngram": (10, round((ngram_tau - 1.0) * 10))})


def test_classes_that_tell_requests_apart_predict_them_and_one_pool_does_not() -> None:
    requests = [labelled(4.0), labelled(2.0)] * 4
    apart = online_errors(requests, ["auto:doc:s", "auto:text:s"] * 4)["w"]["ngram"]
    pooled = online_errors(requests, ["auto:all:s"] * 8)["w"]["ngram"]
    # The first request has nothing before it; the second, of another kind, falls
    # back to every earlier request (4.0, off by 2); from then on each kind knows.
    assert apart == pytest.approx([2.0] + [0.0] * 6)
    assert sum(pooled) / len(pooled) > 0.9


def test_a_request_never_predicts_itself() -> None:
    errors = online_errors([labelled(3.0)], ["auto:doc:s"])
    assert errors == {}

"""The training tests' models are tiny: one torch thread runs them fastest, and a
thread pool spread over every core stalls at each barrier whenever anything else
(an engine, another job on a shared machine) runs on one of those cores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

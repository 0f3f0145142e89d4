"""Stage 1 without vLLM (``--answers-engine transformers``, for a GPU machine with no
vLLM build): batched, left-padded greedy answers equal one-at-a-time greedy decoding,
end at (and keep) the first EOS, and are appended where a rerun resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.answers import Sample, _generate_hf, read_samples
from training.prompts import Prompt

pytestmark = pytest.mark.timeout(120)
PROMPTS = [[1, 2, 3], [1, 5, 9, 11, 4, 3, 2], [1, 20], [1, 8, 8, 8, 8]]


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=True, bos_token_id=1)
    model = LlamaForCausalLM(config).eval()
    # EOS is the first prompt's first answer token: some answers end at once, others
    # run to the length limit, in the same batch.
    with torch.no_grad():
        model.config.eos_token_id = int(model(torch.tensor([PROMPTS[0]])).logits[0, -1].argmax())
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.save_pretrained(path)
    return path


def greedy(model_dir: Path, ids: list[int], limit: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    eos, seq, out = model.config.eos_token_id, list(ids), []
    with torch.no_grad():
        for _ in range(limit):
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            out.append(nxt)
            seq.append(nxt)
            if nxt == eos:
                break
    return out


def test_batched_answers_equal_one_at_a_time_greedy(tiny_target: Path, tmp_path: Path) -> None:
    todo = [(Prompt(f"p{i}", "chat", "-"), ids) for i, ids in enumerate(PROMPTS)]
    out, done = tmp_path / "answers.jsonl", list[Sample]()
    _generate_hf(tiny_target, todo, out, done, max_answer_tokens=12, batch=3, device="cpu")
    by_id = {s.id: s for s in read_samples(out)}
    assert sorted(by_id) == ["p0", "p1", "p2", "p3"] and len(done) == 4
    answers = []
    for i, ids in enumerate(PROMPTS):
        sample = by_id[f"p{i}"]
        assert sample.prompt_ids == ids
        assert sample.answer_ids == greedy(tiny_target, ids, 12), i
        answers.append(sample.answer_ids)
    assert len(answers[0]) == 1 and max(map(len, answers)) == 12, answers

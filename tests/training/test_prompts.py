"""The built-in prompt sets: the held-out prompts stay out of training, and growing the
training set never moves a row (a recipe's ``--skip``/``--limit`` keep their meaning)."""

from __future__ import annotations

from pathlib import Path

import pytest

from training import prompts as P


def test_no_heldout_source_reaches_the_training_set() -> None:
    train = P.prompts_from_file(P.TRAIN_PATH)
    ids = {p.id for p in train}
    texts = {p.text for p in train}
    assert len(ids) == len(train), "a training prompt appears twice"
    reserved = list(P._all_prompts(reserved=True))
    assert reserved, "the reserved sources yield no prompt on this Python"
    assert not {p.id for p in reserved} & ids
    for p in P.heldout_prompts():
        assert p.text not in texts, p.id


def test_third_party_and_new_subjects_never_use_a_reserved_source() -> None:
    assert not set(P.THIRD_PARTY_MODULES) & set(P.RESERVED_MODULES)
    assert not set(P.CHAT_SUBJECTS) & set(P.RESERVED_SUBJECTS)
    assert len(set(P.CHAT_SUBJECTS)) == len(P.CHAT_SUBJECTS), "a chat subject is listed twice"


def test_the_fourth_slice_comes_from_installed_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows 21,982 on: code and copy prompts from the packages an install brings (a few
    rows whose standard-library signature prints an object's address get a new id each
    run, and count as misses here)."""
    rows = P.prompts_from_file(P.TRAIN_PATH)[21981:]
    assert len(rows) >= 6144
    monkeypatch.setattr(P, "MODULES", ())
    third_party = {p.id for p in P._all_prompts(reserved=False) if p.kind != "chat"}
    code = [p for p in rows if p.kind != "chat"]
    assert sum(p.id in third_party for p in code) >= 0.99 * len(code)
    chat = {p.text for p in rows if p.kind == "chat"}
    assert not any(t.format(s=s) in chat for t in P.CHAT_TEMPLATES for s in P.FIRST_CHAT_SUBJECTS)


def test_extending_keeps_every_row_in_place(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    first = P.training_prompts(limit=6)
    P.save_prompts(path, first)
    P.extend_training_set(path, total=30)
    grown = P.prompts_from_file(path)
    assert grown[:6] == first
    assert len(grown) == 30
    assert len({p.id for p in grown}) == 30

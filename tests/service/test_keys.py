"""Bearer keys: format, key file, header parsing, the constant-time check."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.keys import KeyRing, bearer_token, check_key, read_key_file


def test_key_ring_accepts_only_its_keys() -> None:
    ring = KeyRing(["key-one-11111", "key-two-22222"])
    assert ring.accepts("key-one-11111") and ring.accepts("key-two-22222")
    for wrong in ("key-one-1111", "key-one-111111", "KEY-ONE-11111", "", None, "\udcff\u00e9"):
        assert not ring.accepts(wrong)
    assert len(ring) == 2 and bool(ring)
    assert "key-one" not in repr(ring)
    assert not KeyRing([]) and not KeyRing([]).accepts("anything")


@pytest.mark.parametrize("header, token", [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER   abc  ", "abc"),
    ("Bearer", None), ("Bearer ", None), ("Basic abc", None), ("abc", None), ("", None),
    (None, None),
])
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize("key", ["short", "has space inside", "tab\there-x", "ünicode-key",
                                 "x" * 513])
def test_key_format_is_refused_without_echoing_the_key(key: str) -> None:
    with pytest.raises(ValueError) as exc:
        check_key(key)
    assert key not in str(exc.value)


def test_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# production keys\n\nkey-aaaaaaaa\n   key-bbbbbbbb   \n# key-cccccccc\n")
    assert read_key_file(path) == ["key-aaaaaaaa", "key-bbbbbbbb"]


@pytest.mark.parametrize("content, message", [
    (None, "not found"),
    ("", "holds no keys"),
    ("# only a comment\n\n", "holds no keys"),
    ("key-aaaaaaaa\nbad key here\n", "line 2"),
])
def test_key_file_refused(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "keys"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError) as exc:
        read_key_file(path)
    assert message in str(exc.value)
    assert "key-aaaaaaaa" not in str(exc.value) and "bad key" not in str(exc.value)

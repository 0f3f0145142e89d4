"""The wire's basic types: text that is valid Unicode, bounded names, token ids, and
the strict base model every request model derives from."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints


def _valid_unicode(value: str) -> str:
    # A JSON escape like "\ud800" decodes to a lone surrogate: no tokenizer can
    # encode it and no UTF-8 response can carry it, so refuse it at the edge.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it contains an unpaired "
                         "surrogate escape such as \\ud800)") from None
    return value


_UNICODE = AfterValidator(_valid_unicode)
# Length bounds go inside the alias, before the Unicode check: declared on the
# field instead, pydantic reports them as list lengths ("at most 256 items").
Text = Annotated[str, _UNICODE]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256), _UNICODE]
StopString = Name
User = Annotated[str, StringConstraints(max_length=512), _UNICODE]
# Token ids are checked against the vocabulary once the tokenizer is known.
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]


def _token_id_key(key: str) -> str:
    if not (key.isascii() and key.isdigit() and len(key) <= 10) or key != str(int(key)):
        raise ValueError("keys must be token ids written as decimal strings, like \"50256\"")
    return key


# logit_bias keys: token ids written as JSON object keys, as OpenAI specifies.
TokenIdKey = Annotated[str, AfterValidator(_token_id_key)]
# vLLM's limits: at most 128 characters, none of '@', '/', '\\' or NUL.
CacheSalt = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                             pattern=r"^[^@/\\\x00]+$"), _UNICODE]


class WireModel(BaseModel):
    """Requests reject unknown arguments and non-finite numbers, like OpenAI does.

    Strict: ``"10"``, ``true`` or ``2.0`` for an integer and ``"true"`` for a
    boolean are type errors, as in OpenAI's API, not silently converted values.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

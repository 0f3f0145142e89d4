"""Bearer keys: their format, the key file, and a constant-time check.

Kept free of HTTP so that settings validation (start-up, ``specgate config
check``) and both key checks (API keys on ``/v1/*``, the admin key) share one
implementation. Nothing here ever puts key material into an exception
message: errors name the line or the rule, never the key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from pathlib import Path

# Printable ASCII without spaces: anything else could not travel intact in an
# HTTP header, so a key containing it could never be presented.
_KEY = re.compile(r"^[\x21-\x7e]{8,512}$")
KEY_RULE = "8 to 512 printable ASCII characters without spaces"


def check_key(key: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"an API key must be {KEY_RULE}")


def read_key_file(path: Path) -> list[str]:
    """One key per line; blank lines and lines starting with '#' are ignored.

    A missing, unreadable or key-less file is an error: starting with no keys
    would silently leave ``/v1/*`` open (or closed to everyone).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"API keys file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"API keys file {path} cannot be read: {type(e).__name__}") from None
    keys: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        if not _KEY.match(key):
            raise ValueError(f"API keys file {path}, line {number}: a key must be {KEY_RULE}")
        keys.append(key)
    if not keys:
        raise ValueError(f"API keys file {path} holds no keys (one per line; '#' comments)")
    return keys


def bearer_token(authorization: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class KeyRing:
    """A set of accepted keys, checked in constant time.

    Keys are compared as SHA-256 digests: ``compare_digest`` is constant-time
    only for inputs of equal length, and digests hide the key lengths too.
    Every key is compared, with no early exit, so the time taken does not
    reveal which key (if any) matched.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = tuple(_digest(k) for k in keys)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:
        return f"KeyRing({len(self._digests)} keys)"

    def accepts(self, token: str | None) -> bool:
        if token is None:
            return False
        given = _digest(token)
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(given, digest)
        return matched


def _digest(key: str) -> bytes:
    # surrogatepass: whatever a header carried must hash, never raise.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()

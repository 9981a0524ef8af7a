"""Request and response signing as Tablestore defines it, shared by the local server (which
verifies requests and signs responses) and the clients that start one (its default keys).

The formulas mirror `tablestore.auth` and `tablestore.protocol` of SDK 6.4.8: V2 signs with
HMAC-SHA1 of the secret, V4 with HMAC-SHA256 of a key derived per day and region; a response is
signed with the key its request was signed with.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from functools import lru_cache

# Credentials a local server accepts unless told otherwise (they guard nothing of value): the
# server's default, and what a client of an embedded or `local serve` instance signs with.
DEFAULT_ACCESS_KEY_ID = "local"
DEFAULT_ACCESS_KEY_SECRET = "local-secret"
SIGNATURE_HEADERS = ("x-ots-signature", "x-ots-signaturev4")


def content_md5(body: bytes) -> str:
    """The `x-ots-contentmd5` of a body: its MD5, base64."""
    return base64.b64encode(hashlib.md5(body).digest()).decode()


@lru_cache(maxsize=256)
def v4_signing_key(secret: str, sign_date: str, region: str) -> bytes:
    key = ("aliyun_v4" + secret).encode()
    for part in (sign_date, region, "ots", "aliyun_v4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    # The SDK signs with the base64 *text* of the derived key.
    return base64.b64encode(key)


def canonical_headers(headers: Mapping[str, str]) -> str:
    """The signed `x-ots-*` headers, sorted, one `name:value` a line (lower-case names)."""
    items = sorted(
        f"{k}:{v.strip()}"
        for k, v in headers.items()
        if k.startswith("x-ots-") and k not in SIGNATURE_HEADERS
    )
    return "\n".join(items)


def b64_hmac(key: bytes, data: bytes, digest: str) -> str:
    return base64.b64encode(hmac.new(key, data, digest).digest()).decode()


def request_signature(uri: str, query: str, headers: Mapping[str, str], key: bytes, v4: bool) -> str:
    """The signature of a POST request: V4 (`x-ots-signaturev4`, ``key`` from
    ``v4_signing_key``) or V2 (`x-ots-signature`, ``key`` the secret's bytes)."""
    canonical = f"{uri}\nPOST\n{query}\n{canonical_headers(headers)}\n"
    if v4:
        return b64_hmac(key, (canonical + "ots").encode(), "sha256")
    return b64_hmac(key, canonical.encode(), "sha1")


def sign_response(signing_key: bytes, uri: str, ots_headers: Mapping[str, str]) -> str:
    """The `Authorization` signature over every `x-ots-*` response header (always HMAC-SHA1)."""
    text = canonical_headers(ots_headers) + "\n" + uri
    return b64_hmac(signing_key, text.encode(), "sha1")

"""Request verification (content MD5, date skew, V2/V4 signatures, STS tokens) and response signing.

The formulas mirror `tablestore.auth` and `tablestore.protocol` of SDK 6.4.8: the server must know
each client's secret because responses are signed with the same key as the request.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from tsmigrate.local.errors import auth_failed, echo, invalid

MAX_SKEW_S = 15 * 60
# Credentials a local server accepts unless told otherwise (they guard nothing of value).
DEFAULT_ACCESS_KEY_ID = "local"
DEFAULT_ACCESS_KEY_SECRET = "local-secret"
_REQUIRED = (
    "x-ots-date",
    "x-ots-apiversion",
    "x-ots-accesskeyid",
    "x-ots-instancename",
    "x-ots-contentmd5",
)
_SIGNATURE_HEADERS = ("x-ots-signature", "x-ots-signaturev4")
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,6})?Z\Z")


@dataclass
class Credentials:
    """Who may call: AccessKeyId -> secret, and accepted STS tokens (token -> AccessKeyId)."""

    keys: dict[str, str] = field(default_factory=dict)
    sts_tokens: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Caller:
    access_key_id: str
    instance: str
    signing_key: bytes  # the key the response is signed with (secret, or derived V4 key)


def content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


@lru_cache(maxsize=64)  # the SDK sends whole seconds: requests in a second share their date
def parse_ots_date(text: str) -> float:
    """Seconds since the epoch of an `x-ots-date` value; ValueError if it is malformed."""
    m = _DATE_RE.match(text)
    if m is None:
        raise ValueError(text)
    parts = tuple(int(g) for g in m.groups())
    return float(calendar.timegm((*parts, 0, 0, 0)))


@lru_cache(maxsize=256)
def v4_signing_key(secret: str, sign_date: str, region: str) -> bytes:
    key = ("aliyun_v4" + secret).encode()
    for part in (sign_date, region, "ots", "aliyun_v4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    # The SDK signs with the base64 *text* of the derived key.
    return base64.b64encode(key)


def canonical_headers(headers: Mapping[str, str]) -> str:
    items = sorted(
        f"{k}:{v.strip()}"
        for k, v in headers.items()
        if k.startswith("x-ots-") and k not in _SIGNATURE_HEADERS
    )
    return "\n".join(items)


def verify_request(
    uri: str, query: str, headers: Mapping[str, str], body: bytes | None, creds: Credentials, now: float
) -> Caller:
    """Check a request's headers and signature; `headers` has lower-case names. With `body` None
    (not read yet) everything but the content MD5 is checked: the signature covers the headers
    only, so a request can be authenticated before its body is read."""
    for name in _REQUIRED:
        if name not in headers:
            raise invalid(f"Missing header: {name}.")
    date = headers["x-ots-date"]
    try:
        sent = parse_ots_date(date)
    except ValueError:
        raise invalid(f"Invalid date format: {echo(date)}.") from None
    if abs(sent - now) > MAX_SKEW_S:
        raise auth_failed(f"Mismatch between system time and x-ots-date: {date}.")
    akid = headers["x-ots-accesskeyid"]
    secret = creds.keys.get(akid)
    if secret is None:
        raise auth_failed("The AccessKeyID does not exist.")
    token = headers.get("x-ots-ststoken")
    if token is not None and creds.sts_tokens.get(token) != akid:
        raise auth_failed("The security token you provided is invalid.")
    if body is not None and headers["x-ots-contentmd5"] != content_md5(body):
        raise auth_failed(
            "Mismatch between MD5 value of request body and x-ots-contentmd5 in header."
        )
    canonical = f"{uri}\nPOST\n{query}\n{canonical_headers(headers)}\n"
    if "x-ots-signaturev4" in headers:
        key = _v4_key(headers, secret)
        expected = _b64_hmac(key, (canonical + "ots").encode(), "sha256")
        given = headers["x-ots-signaturev4"]
    elif "x-ots-signature" in headers:
        key = secret.encode()
        expected = _b64_hmac(key, canonical.encode(), "sha1")
        given = headers["x-ots-signature"]
    else:
        raise invalid("Missing header: x-ots-signature.")
    if not hmac.compare_digest(expected, given):
        raise auth_failed("Signature mismatch.")
    return Caller(akid, headers["x-ots-instancename"], key)


def _v4_key(headers: Mapping[str, str], secret: str) -> bytes:
    for name in ("x-ots-signdate", "x-ots-signregion"):
        if name not in headers:
            raise invalid(f"Missing header: {name}.")
    return v4_signing_key(secret, headers["x-ots-signdate"], headers["x-ots-signregion"])


def _b64_hmac(key: bytes, data: bytes, digest: str) -> str:
    return base64.b64encode(hmac.new(key, data, digest).digest()).decode()


def sign_response(signing_key: bytes, uri: str, ots_headers: Mapping[str, str]) -> str:
    """The `Authorization` signature over every `x-ots-*` response header (always HMAC-SHA1)."""
    text = canonical_headers(ots_headers) + "\n" + uri
    return _b64_hmac(signing_key, text.encode(), "sha1")


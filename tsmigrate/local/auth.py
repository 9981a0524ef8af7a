"""Request verification (content MD5, date skew, V2/V4 signatures, STS tokens); the formulas,
and response signing, are the wire protocol's (``tsmigrate.wire.signing``). The server must
know each client's secret because responses are signed with the same key as the request.
"""

from __future__ import annotations

import calendar
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from tsmigrate.local.errors import auth_failed, echo, invalid
from tsmigrate.wire.signing import (  # noqa: F401 (the server's defaults, named here too)
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_ACCESS_KEY_SECRET,
    content_md5,
    request_signature,
    sign_response,
    v4_signing_key,
)

MAX_SKEW_S = 15 * 60
_REQUIRED = (
    "x-ots-date",
    "x-ots-apiversion",
    "x-ots-accesskeyid",
    "x-ots-instancename",
    "x-ots-contentmd5",
)
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


@lru_cache(maxsize=64)  # the SDK sends whole seconds: requests in a second share their date
def parse_ots_date(text: str) -> float:
    """Seconds since the epoch of an `x-ots-date` value; ValueError if it is malformed."""
    m = _DATE_RE.match(text)
    if m is None:
        raise ValueError(text)
    parts = tuple(int(g) for g in m.groups())
    return float(calendar.timegm((*parts, 0, 0, 0)))


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
    if "x-ots-signaturev4" in headers:
        key = _v4_key(headers, secret)
        expected = request_signature(uri, query, headers, key, v4=True)
        given = headers["x-ots-signaturev4"]
    elif "x-ots-signature" in headers:
        key = secret.encode()
        expected = request_signature(uri, query, headers, key, v4=False)
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

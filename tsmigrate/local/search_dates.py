"""DATE values of search indexes: strings parsed with a field's `date_formats`.

The formats are Java `DateTimeFormatter` patterns, parsed strictly as the service does: a
two-letter field takes exactly two digits (`yyyy-MM-dd` refuses `2022-05-6`), literals are
quoted (`yyyy-MM-dd'T'HH:mm:ss`), `S...` are fractions of a second, `Z` / `X` / `XXX` offsets.
`epoch_millis` and `epoch_second` read numbers. Times without an offset are UTC. A DATE value is
the epoch time in milliseconds.
"""

from __future__ import annotations

import calendar
import functools
import re

_LETTERS = {
    "y": "year", "M": "month", "d": "day", "H": "hour", "m": "minute", "s": "second", "S": "fraction",
}
_TOKEN = re.compile(r"'[^']*'|([a-zA-Z])\1*|.", re.DOTALL)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str] | None:
    """A regex for a Java pattern, or None for letters this parser does not know."""
    parts = []
    for m in _TOKEN.finditer(pattern):
        token = m.group(0)
        if token.startswith("'"):
            parts.append(re.escape(token[1:-1]) if token != "''" else "'")
            continue
        letter = token[0]
        if letter in ("Z", "X"):
            parts.append(r"(?P<zone>Z|[+-]\d{2}:?\d{2})")
        elif letter in _LETTERS:
            name = _LETTERS[letter]
            if name == "fraction":
                parts.append(rf"(?P<fraction>\d{{{len(token)}}})")
            elif name == "year" and len(token) != 2:
                parts.append(r"(?P<year>\d{4})")
            else:
                width = "{1,2}" if len(token) == 1 else f"{{{len(token)}}}"
                parts.append(rf"(?P<{name}>\d{width})")
        elif letter.isalpha():
            return None
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


def parse_date(text: str, formats: tuple[str, ...]) -> int | None:
    """Epoch milliseconds of `text` by the first format that reads all of it, else None."""
    for pattern in formats:
        if pattern in ("epoch_millis", "epoch_second"):
            try:
                number = int(text)
            except ValueError:
                continue
            return number * 1000 if pattern == "epoch_second" else number
        regex = _compile(pattern)
        m = regex.fullmatch(text) if regex is not None else None
        if m is None:
            continue
        ms = _to_ms(m.groupdict())
        if ms is not None:
            return ms
    return None


def _to_ms(parts: dict[str, str | None]) -> int | None:
    def num(name: str, default: int) -> int:
        value = parts.get(name)
        return default if value is None else int(value)

    year = num("year", 1970)
    if parts.get("year") is not None and len(parts["year"] or "") == 2:
        year += 2000
    month, day = num("month", 1), num("day", 1)
    hour, minute, second = num("hour", 0), num("minute", 0), num("second", 0)
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    fraction = parts.get("fraction")
    millis = int((fraction + "000")[:3]) if fraction else 0
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    zone = parts.get("zone")
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds * 1000 + millis

"""What a column name suggests about its values: the name heuristics the lint rules share.

Names are split into lowercase words (``createdAt`` and ``created_at`` -> ``created``, ``at``;
``OrderNumber`` -> ``order``, ``number``; ``CardID`` -> ``card``, ``id``). Most heuristics look at
the last word, the head noun of the name: ``file_name`` is a name, not a file, and ``time_zone``
is a zone, not a time. That keeps the rules quiet on the many names that merely mention a word.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def words(name: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in _WORD.findall(name))


# A name ending in one of these holds a point in time: ts, day, created_at, event_time, log_hour.
_TIME_HEADS = frozenset({
    "ts", "time", "timestamp", "tstamp", "datetime", "date", "day", "hour", "minute", "week",
    "month", "year", "epoch", "at", "created", "updated", "modified", "inserted",
})
# Dates that are not "now" when the row is written, so they do not grow with the writes.
_NOT_WRITE_TIME = frozenset({"birth", "birthday", "expiry", "expire", "expires", "due", "of"})


def is_time_like(name: str) -> bool:
    """A write time or a date: ``ts``, ``day``, ``created_at``, ``gmt_create``, ``posted_on``."""
    parts = words(name)
    if not parts or _NOT_WRITE_TIME & set(parts):
        return False
    if parts[0] == "gmt":  # Alibaba's convention: gmt_create, gmt_modified
        return True
    if parts[-1] == "on" and len(parts) > 1 and parts[-2].endswith("ed"):  # created_on
        return True
    return parts[-1] in _TIME_HEADS


_SEQUENCE_WORDS = frozenset({"seq", "sequence", "counter"})
# Numbers that are handed out in order: order_no, InvoiceNumber, txn_seq, ticket_num.
_NUMBERED = r"order|invoice|ticket|bill|receipt|txn|transaction|serial|batch|message|msg|event"
_NUMBER_SUFFIX = re.compile(rf"(?:{_NUMBERED})(?:no|nr|num|number|seq)$")


def is_sequence(name: str) -> bool:
    """A value that grows with every write: ``seq``, ``counter``, ``order_no``, ``OrderNumber``."""
    parts = words(name)
    return bool(_SEQUENCE_WORDS & set(parts)) or bool(_NUMBER_SUFFIX.search("".join(parts)))


# One-word ids (``userid``); a bare "ends in id" would also take paid, valid or android.
_COMPACT_ID = re.compile(
    r"(?:user|order|device|account|customer|item|product|card|seller|shop|store|member|session"
    r"|message|msg|event|request|trade|record|post|group|task|job)id"
)


def is_id(name: str) -> bool:
    """An identifier: ``id``, ``uid``, ``user_id``, ``CardID``, ``orderid``."""
    parts = words(name)
    return bool(parts) and (
        parts[-1] in ("id", "uid") or (len(parts) == 1 and bool(_COMPACT_ID.fullmatch(parts[0])))
    )


# Attributes with few distinct values. ``tenant`` is left out on purpose: a tenant id is the
# usual, correct partition key of a multi-tenant table; a dominant tenant is a data question.
_FEW_VALUES = frozenset({
    "status", "state", "type", "kind", "category", "region", "country", "province", "city",
    "gender", "sex", "level", "flag", "priority", "tier", "language", "lang", "locale", "platform",
    "channel", "currency", "enabled", "active", "deleted",
})
_QUALIFIERS = frozenset({"id", "code", "name"})


def has_few_values(name: str) -> bool:
    """``status``, ``order_type``, ``CountryCode``, ``region_id``, ``day_of_week``: a handful
    of values at most."""
    parts = words(name)
    if "of" in parts and parts[0] in _TIME_HEADS and parts[-1] in _TIME_HEADS:  # hour_of_day
        return True
    if parts and parts[-1] in _QUALIFIERS and len(parts) > 1:
        parts = parts[:-1]
    return bool(parts) and parts[-1] in _FEW_VALUES


_PAYLOAD_HEADS = frozenset({
    "payload", "body", "content", "html", "xml", "raw", "response", "document", "doc", "blob",
    "image", "file", "attachment", "snapshot", "json",
})


def _singulars(word: str) -> set[str]:
    """``word`` and what it is the plural of, if anything: bodies -> body, responses -> response,
    boxes -> box (only English's regular plurals; the heads above have no other kind)."""
    forms = {word}
    if word.endswith("ies"):
        forms.add(word[:-3] + "y")
    if word.endswith("es"):
        forms.add(word[:-2])
    if word.endswith("s"):
        forms.add(word[:-1])
    return forms


def is_payload(name: str) -> bool:
    """A whole document, response or file, or several: ``payload``, ``response_body``,
    ``raw_html``, ``documents``. ``payload_key`` or ``image_url`` (a pointer) end in another
    word and do not match."""
    parts = words(name)
    return bool(parts) and bool(_singulars(parts[-1]) & _PAYLOAD_HEADS)


_MONEY_WORDS = frozenset({
    "price", "prices", "amount", "cost", "costs", "fee", "fees", "money", "balance", "total",
    "subtotal", "charge", "charges", "charged", "salary", "wage", "wages", "payment", "payout",
    "revenue", "income", "refund", "credit", "credits", "deposit", "fare", "tax", "discount", "gmv",
})
# Quantities that share a word with money (tax_rate, total_count, battery_charge) and integer
# minor units that happen to be declared as DOUBLE (price_cents): not currency amounts.
_NOT_MONEY = frozenset({
    "rate", "ratio", "pct", "percent", "percentage", "count", "cnt", "qty", "quantity", "score",
    "weight", "distance", "time", "duration", "seconds", "ms", "size", "bytes", "length", "level",
    "battery", "cents", "cent", "fen", "minor", "micros",
})


def is_money(name: str) -> bool:
    """A currency amount: ``price``, ``amount``, ``total_fee``, ``account_balance``."""
    parts = set(words(name))
    return bool(parts & _MONEY_WORDS) and not parts & _NOT_MONEY

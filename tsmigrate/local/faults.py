"""Injected faults: a fraction of requests (or of BatchWriteRow rows) answered with service errors.

Spec syntax: comma-separated `KIND[@Api1|Api2...]=FRACTION`, plus an optional `seed=N`, e.g.
`server_busy=0.1,capacity@BatchWriteRow|PutRow=0.05,batch_row=0.02,seed=7`.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tsmigrate.local.errors import OTSError, internal_error, not_enough_cu, server_busy

__all__ = ["KINDS", "FaultPlan", "Rule"]  # public (README "Public API")

KINDS: dict[str, Callable[[], OTSError]] = {
    "server_busy": server_busy,
    "capacity": not_enough_cu,
    "timeout": lambda: OTSError(503, "OTSTimeout", "Operation timeout."),
    "unavailable": lambda: OTSError(503, "OTSPartitionUnavailable", "The partition is not available."),
    "internal": internal_error,
    # Per-row failure inside an otherwise successful BatchWriteRow.
    "batch_row": server_busy,
    # The request is done, then answered as if it timed out: the client cannot tell whether
    # its write happened (the service's OTSTimeout after a commit, or a lost reply).
    "done_timeout": lambda: OTSError(503, "OTSTimeout", "Operation timeout."),
}
# Kinds drawn after the request was carried out rather than before.
AFTER_KINDS = frozenset({"done_timeout"})
BEFORE_KINDS = frozenset(KINDS) - AFTER_KINDS - {"batch_row"}
HELP = (
    "Inject faults: comma-separated KIND[@Api|Api...]=FRACTION (and optional seed=N). "
    "KIND is one of server_busy (503 OTSServerBusy), capacity (403 OTSNotEnoughCapacityUnit), "
    "timeout (503 OTSTimeout), unavailable (503 OTSPartitionUnavailable), internal "
    "(500 OTSInternalServerError), done_timeout (the request is carried out, then answered 503 "
    "OTSTimeout) or batch_row (single rows of BatchWriteRow fail with OTSServerBusy). "
    "Example: server_busy=0.1,capacity@PutRow|GetRow=0.05,batch_row=0.02"
)


@dataclass(frozen=True)
class Rule:
    kind: str
    fraction: float
    apis: frozenset[str] | None  # None: every API

    def applies(self, api: str) -> bool:
        return self.apis is None or api in self.apis


class FaultPlan:
    def __init__(self, rules: list[Rule], seed: int | None = None) -> None:
        self.rules = rules
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        rules: list[Rule] = []
        seed: int | None = None
        for part in filter(None, (p.strip() for p in spec.split(","))):
            lhs, sep, rhs = part.partition("=")
            if not sep:
                raise ValueError(f"fault {part!r}: expected KIND=FRACTION")
            if lhs.strip() == "seed":
                seed = int(rhs)
                continue
            kind, _, scope = lhs.strip().partition("@")
            if kind not in KINDS:
                raise ValueError(f"fault {part!r}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
            fraction = float(rhs)
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"fault {part!r}: fraction must be within [0, 1]")
            apis = frozenset(a for a in scope.split("|") if a) or None
            rules.append(Rule(kind, fraction, apis))
        return cls(rules, seed)

    def _hit(self, fraction: float) -> bool:
        with self._lock:
            return self._random.random() < fraction

    def request_error(self, api: str) -> OTSError | None:
        """The error to answer instead of carrying out the request, if any."""
        return self._draw(api, BEFORE_KINDS)

    def reply_error(self, api: str) -> OTSError | None:
        """The error to answer after the request was carried out, if any."""
        return self._draw(api, AFTER_KINDS)

    def _draw(self, api: str, kinds: frozenset[str]) -> OTSError | None:
        for rule in self.rules:
            if rule.kind in kinds and rule.applies(api) and self._hit(rule.fraction):
                return KINDS[rule.kind]()
        return None

    def row_error(self, api: str) -> OTSError | None:
        for rule in self.rules:
            if rule.kind == "batch_row" and rule.applies(api) and self._hit(rule.fraction):
                return KINDS[rule.kind]()
        return None

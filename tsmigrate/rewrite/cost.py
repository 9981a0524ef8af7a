"""What a planned rewrite will cost, for ``tsmigrate plan``: the data to copy from the source's
split points (ComputeSplitPointsBySize, a read call), and the time at a stated rate."""

from __future__ import annotations

from typing import Any

import attrs

from tsmigrate import ops
from tsmigrate.plan import Plan

# The copy rate the estimate assumes, stated in every output (bench/rewrite.py measures yours).
RATE_MB_S = 20.0


def with_costs(client: Any, plan: Plan, rate_mb_s: float = RATE_MB_S) -> Plan:
    """``plan`` with every rewrite_table step's cost estimated from the live source."""
    from tsmigrate.rewrite import splits

    steps = []
    for step in plan.steps:
        if isinstance(step, ops.RewriteTable):
            size = splits.estimate(client, step.source)
            step = attrs.evolve(step, cost=ops.RewriteCost(size.bytes, size.splits, rate_mb_s))
        steps.append(step)
    return attrs.evolve(plan, steps=steps)

"""backfill result_count from the payload

Revision ID: f8710b3fa125
Revises: 924edfc6227f
Created: 2026-11-30T22:54:24+00:00

Services store ``result_count`` with each snapshot from now on; the rows written before get it
from their payload. A payload that is not JSON, or has no results list, leaves the row alone.
"""

import json

revision = 'f8710b3fa125'
down_revision = '924edfc6227f'
message = 'backfill result_count from the payload'
tsmigrate_version = '0.1.0'


def count_results(row):
    """result_count of a snapshot row: how many results its stored response holds."""
    try:
        results = json.loads(row["payload"])["results"]
    except (KeyError, TypeError, ValueError):
        return None
    return {"result_count": len(results)} if isinstance(results, list) else None


def drop_result_count(row):
    return {"result_count": None}


def upgrade(op):
    op.backfill("serp_snapshots", count_results, columns=["payload"])


def downgrade(op):
    # Services written for this revision keep storing result_count; only the backfilled cells
    # cannot be told from theirs, so the downgrade removes the column from every row.
    op.backfill("serp_snapshots", drop_result_count, columns=["result_count"])

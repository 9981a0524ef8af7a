"""index serp snapshots by status and day

Revision ID: 924edfc6227f
Revises: 12f89d8f2438
Created: 2026-11-30T22:54:23+00:00
"""
from tsmigrate.schema import SecondaryIndex

revision = '924edfc6227f'
down_revision = '12f89d8f2438'
message = 'index serp snapshots by status and day'
tsmigrate_version = '0.1.0'


def upgrade(op):
    op.create_index('serp_snapshots', SecondaryIndex(
        'by_status',
        keys=['status', 'day'],
        include=['credits'],
    ))


def downgrade(op):
    op.drop_index('serp_snapshots', 'by_status')

"""example models: serp snapshots, telemetry, student cards

Revision ID: 12f89d8f2438
Revises: (base)
Created: 2026-11-30T22:54:07+00:00
"""
from tsmigrate.keys import Concat, HashPrefix
from tsmigrate.schema import (
    AttributeColumn,
    DefinedColumn,
    PrimaryKeyColumn,
    SearchField,
    SearchIndex,
    SecondaryIndex,
    Table,
    TableOptions,
)

revision = '12f89d8f2438'
down_revision = None
message = 'example models: serp snapshots, telemetry, student cards'
tsmigrate_version = '0.1.0'


def upgrade(op):
    op.create_table(Table(
        'card_consumption',
        primary_key=[
            PrimaryKeyColumn('CardID', type='STRING'),
            PrimaryKeyColumn('DeviceID', type='INTEGER'),
            PrimaryKeyColumn('SellerID', type='STRING'),
            PrimaryKeyColumn('OrderNumber', type='INTEGER'),
        ],
    ))
    op.create_search_index('card_consumption', SearchIndex(
        'by_seller',
        fields=[
            SearchField('AmountFen', type='LONG', sort_and_agg=True),
            SearchField('PaidAt', type='LONG', sort_and_agg=True),
            SearchField('SellerID', type='KEYWORD'),
        ],
    ))
    op.create_table(Table(
        'card_consumption_by_device',
        primary_key=[
            PrimaryKeyColumn(
                'device_key',
                type='STRING',
                derivation=Concat(
                    fields=['DeviceID', 'SellerID', 'CardID'],
                    pad={'DeviceID': 6},
                ),
            ),
            PrimaryKeyColumn('OrderNumber', type='INTEGER'),
        ],
        attributes=[
            AttributeColumn('CardID', type='STRING'),
            AttributeColumn('DeviceID', type='INTEGER'),
            AttributeColumn('SellerID', type='STRING'),
        ],
    ))
    op.create_table(Table(
        'serp_snapshots',
        primary_key=[
            PrimaryKeyColumn('keyword', type='STRING'),
            PrimaryKeyColumn('day', type='STRING'),
            PrimaryKeyColumn('request_id', type='STRING'),
        ],
        defined_columns=[
            DefinedColumn('credits', type='INTEGER'),
            DefinedColumn('status', type='STRING'),
        ],
        secondary_indexes=[
            SecondaryIndex(
                'by_request_id',
                keys=['request_id'],
                include=['credits', 'status'],
            ),
        ],
    ))
    op.create_table(Table(
        'telemetry',
        primary_key=[
            PrimaryKeyColumn(
                'pk',
                type='STRING',
                derivation=HashPrefix(source='device_id'),
            ),
            PrimaryKeyColumn('ts', type='INTEGER'),
        ],
        defined_columns=[
            DefinedColumn('battery', type='INTEGER'),
            DefinedColumn('device_id', type='STRING'),
            DefinedColumn('serial', type='STRING'),
        ],
        options=TableOptions(time_to_live=7776000, allow_update=False),
        secondary_indexes=[
            SecondaryIndex(
                'by_serial',
                keys=['serial'],
                include=['battery'],
            ),
        ],
    ))
    op.create_search_index('telemetry', SearchIndex(
        'alerts',
        fields=[
            SearchField('battery', type='LONG'),
            SearchField('ts', type='LONG', sort_and_agg=True),
        ],
        time_to_live=7776000,
    ))


def downgrade(op):
    op.drop_search_index('telemetry', 'alerts')
    op.drop_table('telemetry')
    op.drop_table('serp_snapshots')
    op.drop_table('card_consumption_by_device')
    op.drop_search_index('card_consumption', 'by_seller')
    op.drop_table('card_consumption')

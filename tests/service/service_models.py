"""Models (and a fast retry policy) the service-layer tests use; imported, not collected."""

from datetime import datetime
from decimal import Decimal

from tsmigrate import Column, GlobalIndex, LocalIndex, Model, PrimaryKey, SearchField, SearchIndex
from tsmigrate.instance.retry import TsmigrateRetryPolicy
from tsmigrate.keys import Descending, HashPrefix, TimeBucket
from tsmigrate.schema.families import Monthly

# Retries without the production delays, so that fault-injection tests stay quick.
FAST = TsmigrateRetryPolicy(max_retries=30, base_delay_s=0.001, throttled_delay_s=0.001,
                            max_delay_s=0.02)


class Account(Model, table="svc_accounts", version="version"):
    user_id = PrimaryKey(str)
    balance = Column(Decimal, scale=2)
    opened = Column(datetime)
    nickname = Column(str)
    visits = Column(int)
    ratio = Column(float)
    version = Column(int)


class Reading(Model, table="svc_readings"):
    pk = PrimaryKey(str, derive=HashPrefix("device_id", length=4))
    ts = PrimaryKey(int)
    device_id = Column(str, defined=True)
    serial = Column(str, defined=True)
    battery = Column(int, defined=True)
    temp_c = Column(float)
    payload = Column(bytes)

    by_serial = GlobalIndex(keys=["serial"], include=["battery"])
    by_battery = LocalIndex(keys=["pk", "battery"])
    finder = SearchIndex(fields=[
        SearchField("serial", "keyword"), SearchField("battery", "long", sort=True),
        SearchField("ts", "long", sort=True),
    ])


class Tick(Model, table="svc_ticks"):
    bucket = PrimaryKey(int, derive=TimeBucket("ts", buckets=4))
    ts = PrimaryKey(int)
    value = Column(int)


class Event(Model, table="svc_events"):
    device = PrimaryKey(str)
    newest = PrimaryKey(int, derive=Descending("ts"))
    ts = Column(int)
    kind = Column(str)


class Snapshot(Model, table="svc_snapshots",
               family=Monthly("captured_at", ahead=1, retain=3, archive="unused")):
    keyword = PrimaryKey(str)
    captured_at = PrimaryKey(datetime)
    rank = Column(int)

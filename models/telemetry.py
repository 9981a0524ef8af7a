"""Device telemetry: readings every ten seconds from a fleet of devices with sequential ids.

Sequential device ids would put devices provisioned together into one hot partition; an MD5
prefix of four hex characters spreads them while keeping each device's readings in time order.
"""

from tsmigrate import (
    AccessPattern,
    Column,
    GlobalIndex,
    Model,
    PrimaryKey,
    SearchField,
    SearchIndex,
)
from tsmigrate.keys import HashPrefix


class Telemetry(Model, table="telemetry", ttl="90d", max_versions=1, allow_update=False):
    pk = PrimaryKey(str, derive=HashPrefix("device_id", length=4, sep="|"))
    ts = PrimaryKey(int)  # epoch milliseconds

    device_id = Column(str, defined=True)
    serial = Column(str, defined=True)
    battery = Column(int, defined=True)
    temp_c = Column(float)

    by_serial = GlobalIndex(keys=["serial"], include=["battery"])
    alerts = SearchIndex(
        fields=[SearchField("battery", "long"), SearchField("ts", "long", sort=True)],
    )

    latest_for_device = AccessPattern(eq=["device_id"], order_by="-ts")
    device_between = AccessPattern(eq=["device_id"], range="ts")

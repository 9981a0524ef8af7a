"""Student-card consumption records (a university card system).

CardID spreads writes best (tens of thousands of cards, a few payments a day each), so it is the
partition key; OrderNumber grows within a terminal, so it is never first. Amounts are integer
minor units (fen), because DOUBLE loses cents.

``CardConsumptionByDevice`` is the variant for queries by terminal: one terminal's records could
outgrow a partition, so DeviceID, SellerID and CardID are concatenated into the partition key,
DeviceID zero-padded and joined with ',' which sorts below every digit and letter.
"""

from tsmigrate import AccessPattern, Column, Model, PrimaryKey, SearchField, SearchIndex
from tsmigrate.keys import Concat


class CardConsumption(Model, table="card_consumption"):
    card_id = PrimaryKey(str, name="CardID")
    device_id = PrimaryKey(int, name="DeviceID")
    seller_id = PrimaryKey(str, name="SellerID")
    order_number = PrimaryKey(int, name="OrderNumber")

    amount_fen = Column(int, name="AmountFen")
    paid_at = Column(int, name="PaidAt")  # epoch milliseconds

    by_seller = SearchIndex(
        fields=[
            SearchField("SellerID", "keyword"),
            SearchField("PaidAt", "long", sort=True),
            SearchField("AmountFen", "long", sort=True),
        ],
    )

    card_history = AccessPattern(eq=["CardID"])
    seller_by_time = AccessPattern(eq=["SellerID"], range="PaidAt")


class CardConsumptionByDevice(Model, table="card_consumption_by_device"):
    device_key = PrimaryKey(
        str,
        derive=Concat(["DeviceID", "SellerID", "CardID"], sep=",", pad={"DeviceID": 6}),
    )
    order_number = PrimaryKey(int, name="OrderNumber")

    device_id = Column(int, name="DeviceID")
    seller_id = Column(str, name="SellerID")
    card_id = Column(str, name="CardID")
    amount_fen = Column(int, name="AmountFen")

    terminal_orders = AccessPattern(eq=["DeviceID", "SellerID", "CardID"], range="OrderNumber")

"""The same API on AsyncOTSClient: the operations of the sync API, awaited."""

import asyncio

import pytest
from service_models import FAST, Account, Reading

from tsmigrate.service import AlreadyExists, AsyncRows, Attr, Range, Update, VersionConflict


def test_async_rows_queries_and_batches(ots_instance, client):
    async def scenario():
        async_client = ots_instance.async_client()
        try:
            readings = AsyncRows(Reading, async_client, retry=FAST)
            accounts = AsyncRows(Account, async_client, retry=FAST)
            result = await readings.batch_write(
                put=[Reading(device_id="d", ts=i, battery=i, serial="S") for i in range(450)],
                update=[Update({"device_id": "e", "ts": 1}, increment={"battery": 2})])
            assert result.ok and result.written == 451
            got = await readings.get(device_id="e", ts=1)
            assert got.battery == 2
            rows = [r.ts async for r in readings.query(device_id="d", ts=Range(gte=100, lt=105),
                                                      reverse=True)]
            assert rows == [104, 103, 102, 101, 100]
            filtered = [r.ts async for r in readings.query(device_id="d",
                                                          filter=Attr("battery") >= 447)]
            assert filtered == [447, 448, 449]
            fetched = await readings.batch_get([{"device_id": "d", "ts": i} for i in (0, 449, 999)])
            assert [r.ts if r else None for r in fetched] == [0, 449, None]
            await readings.update({"device_id": "d", "ts": 0}, set={"serial": "T"})
            await readings.delete({"device_id": "d", "ts": 1})
            assert await readings.get(device_id="d", ts=1) is None
            assert (await readings.get(Reading.key(device_id="d", ts=0))).serial == "T"
            await readings.delete(Reading.key(device_id="d", ts=2))
            assert await readings.get(device_id="d", ts=2) is None
            assert await readings.count("finder", serial="S") == 447  # 450, one changed, two deleted
            searched = [r.ts async for r in readings.search("finder", serial="T")]
            assert searched == [0]

            mine = await accounts.create(Account(user_id="ann", visits=1), request_id="r1")
            await accounts.create(Account(user_id="ann", visits=1), request_id="r1")
            with pytest.raises(AlreadyExists):
                await accounts.create(Account(user_id="ann", visits=1), request_id="r2")
            theirs = await accounts.get(user_id="ann")
            await accounts.put(theirs)
            with pytest.raises(VersionConflict) as conflict:
                await accounts.put(mine)
            assert conflict.value.current.version == 2
        finally:
            await async_client.close()

    asyncio.run(scenario())

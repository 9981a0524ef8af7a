"""``AsyncRows``: the API of ``Rows`` on an ``AsyncOTSClient`` (the same operations, awaited).

    telemetry = AsyncRows(Telemetry, async_client)
    await telemetry.put(row)
    async for row in telemetry.query(device_id="dev-1"):
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Generic, TypeVar

from tsmigrate.instance.retry import TsmigrateRetryPolicy
from tsmigrate.schema.model import Model
from tsmigrate.service import batch, query, rows
from tsmigrate.service.backoff import policy_for
from tsmigrate.service.calls import Progress, arun, astream
from tsmigrate.service.codec import codec
from tsmigrate.service.conditions import Condition
from tsmigrate.service.routed import AsyncRoutedClient, routed
from tsmigrate.service.rows import Key

M = TypeVar("M", bound=Model)


class AsyncRows(Generic[M]):
    def __init__(self, model: type[M], client: Any, *, retry: TsmigrateRetryPolicy | None = None,
                 routing: bool = True):
        self.model = model
        self.codec = codec(model)
        # While a rewrite moves the model's table, its phase decides which table takes the
        # writes (routing.py); ``routing=False`` always uses the model's own table.
        self.client = routed(self.codec, client, asynchronous=True) if routing else client
        # A batch with updates asks the routed client first whether the table written takes them.
        self.routed = isinstance(self.client, AsyncRoutedClient)
        # Retries of batch rows and of single-row writes, which repeat themselves rather than
        # leave it to the client's policy (tsmigrate.instance.retry's policy by default).
        self.retry = policy_for(retry)

    async def put(self, row: M, *, condition: Condition | None = None, expect: str = "ignore") -> M:
        return await arun(self.client, rows.put_op(self.codec, row, condition, expect, self.retry))

    async def get(self, key: Key | None = None, /, *, columns: Iterable[str] | None = None,
                  **fields: Any) -> M | None:
        return await arun(self.client,
                          rows.get_op(self.codec, rows.key_or_fields(key, fields), columns))

    async def update(
        self, target: M | Mapping[str, Any] | Key, *, set: Mapping[str, Any] | None = None,
        delete: Iterable[str] | None = None, increment: Mapping[str, int] | None = None,
        condition: Condition | None = None, expect: str = "ignore",
    ) -> None:
        await arun(self.client, rows.update_op(self.codec, target, set=set, delete=delete,
                                               increment=increment, condition=condition,
                                               expect=expect, retry=self.retry))

    async def delete(self, target: M | Mapping[str, Any] | Key, *, condition: Condition | None = None,
                     expect: str = "ignore") -> None:
        await arun(self.client, rows.delete_op(self.codec, target, condition=condition,
                                               expect=expect, retry=self.retry))

    async def create(self, row: M, *, request_id: str | None = None) -> M:
        return await arun(self.client, rows.create_op(self.codec, row, request_id, self.retry))

    async def batch_write(
        self, *, put: Iterable[M] = (), update: Iterable[batch.Update] = (),
        delete: Iterable[M | Mapping[str, Any] | Key] = (),
        progress: Progress | None = None,
    ) -> batch.BatchResult:
        return await arun(self.client, batch.write_op(self.codec, put, update, delete, self.retry,
                                                      progress=progress, routed=self.routed))

    async def batch_get(
        self, keys: Iterable[M | Mapping[str, Any] | Key], *, columns: Iterable[str] | None = None
    ) -> batch.BatchGetResult:
        return await arun(self.client, batch.get_op(self.codec, keys, columns, self.retry))

    def query(self, **spec: Any) -> AsyncIterator[M]:
        return astream(self.client, query.range_op(self.codec, query.Query.build(self.codec, spec)))

    def search(self, index: str, **spec: Any) -> AsyncIterator[M]:
        return astream(self.client, query.search_op(self.codec, index, spec))

    async def count(self, index: str, **spec: Any) -> int:
        return await arun(self.client, query.count_op(self.codec, index, spec))

"""``Rows``: a model bound to an ``OTSClient``, the service-facing API.

    telemetry = Rows(Telemetry, client)
    telemetry.put(Telemetry(device_id="dev-1", ts=now, battery=80))
    row = telemetry.get(device_id="dev-1", ts=now)

Every method runs an operation of rows.py / batch.py / query.py; ``AsyncRows`` (aio.py) runs
the very same operations on an ``AsyncOTSClient``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from tsmigrate.instance.retry import TsmigrateRetryPolicy
from tsmigrate.schema.model import Model
from tsmigrate.service import batch, query, rows
from tsmigrate.service.backoff import policy_for
from tsmigrate.service.calls import Progress, run, stream
from tsmigrate.service.codec import codec
from tsmigrate.service.conditions import Condition
from tsmigrate.service.routed import RoutedClient, routed
from tsmigrate.service.rows import Key

M = TypeVar("M", bound=Model)


class Rows(Generic[M]):
    def __init__(self, model: type[M], client: Any, *, retry: TsmigrateRetryPolicy | None = None,
                 routing: bool = True):
        self.model = model
        self.codec = codec(model)
        # While a rewrite moves the model's table, its phase decides which table takes the
        # writes (routing.py); ``routing=False`` always uses the model's own table.
        self.client = routed(self.codec, client) if routing else client
        # A batch with updates asks the routed client first whether the table written takes them.
        self.routed = isinstance(self.client, RoutedClient)
        # Retries of batch rows and of single-row writes, which repeat themselves rather than
        # leave it to the client's policy (tsmigrate.instance.retry's policy by default).
        self.retry = policy_for(retry)

    # -- rows ----------------------------------------------------------------------------------

    def put(self, row: M, *, condition: Condition | None = None, expect: str = "ignore") -> M:
        """Write the whole row (columns set to None are not stored)."""
        return run(self.client, rows.put_op(self.codec, row, condition, expect, self.retry))

    def get(self, key: Key | None = None, /, *, columns: Iterable[str] | None = None,
            **fields: Any) -> M | None:
        """The row with this key (natural fields, derived key columns computed; or the
        ``Model.key(...)`` of it), or None."""
        return run(self.client, rows.get_op(self.codec, rows.key_or_fields(key, fields), columns))

    def update(
        self, target: M | Mapping[str, Any] | Key, *, set: Mapping[str, Any] | None = None,
        delete: Iterable[str] | None = None, increment: Mapping[str, int] | None = None,
        condition: Condition | None = None, expect: str = "ignore",
    ) -> None:
        run(self.client, rows.update_op(self.codec, target, set=set, delete=delete,
                                        increment=increment, condition=condition, expect=expect,
                                        retry=self.retry))

    def delete(self, target: M | Mapping[str, Any] | Key, *, condition: Condition | None = None,
               expect: str = "ignore") -> None:
        run(self.client, rows.delete_op(self.codec, target, condition=condition, expect=expect,
                                        retry=self.retry))

    def create(self, row: M, *, request_id: str | None = None) -> M:
        """Create the row exactly once; repeating it with the same request id succeeds."""
        return run(self.client, rows.create_op(self.codec, row, request_id, self.retry))

    # -- batches -------------------------------------------------------------------------------

    def batch_write(
        self, *, put: Iterable[M] = (), update: Iterable[batch.Update] = (),
        delete: Iterable[M | Mapping[str, Any] | Key] = (),
        progress: Progress | None = None,
    ) -> batch.BatchResult:
        return run(self.client, batch.write_op(self.codec, put, update, delete, self.retry,
                                           progress=progress, routed=self.routed))

    def batch_get(
        self, keys: Iterable[M | Mapping[str, Any] | Key], *, columns: Iterable[str] | None = None
    ) -> batch.BatchGetResult:
        return run(self.client, batch.get_op(self.codec, keys, columns, self.retry))

    # -- queries -------------------------------------------------------------------------------

    def query(self, **spec: Any) -> Iterator[M]:
        """Rows by key prefix and range (see ``query.Query`` for the arguments), lazily."""
        return stream(self.client, query.range_op(self.codec, query.Query.build(self.codec, spec)))

    def search(self, index: str, **spec: Any) -> Iterator[M]:
        return stream(self.client, query.search_op(self.codec, index, spec))

    def count(self, index: str, **spec: Any) -> int:
        """How many rows of the search index match (the service's total count)."""
        return run(self.client, query.count_op(self.codec, index, spec))

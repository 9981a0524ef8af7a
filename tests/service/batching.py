"""Exactly-once checks for batch writes, shared by the test suite and bench/batch_exactly_once.py."""

from collections import Counter

from tablestore import OTSClient
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.instance import rawclient
from tsmigrate.wire.plainbuffer import decode_row


class AnswerCountingClient(OTSClient):
    """An OTSClient that counts, per primary key, how often a BatchWriteRow row was sent and how
    often the service answered it with success."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent: Counter = Counter()
        self.succeeded: Counter = Counter()

    def batch_write_row(self, request):
        keys = {
            table: [tuple(v for _, v in item.row.primary_key) for item in entry.row_items]
            for table, entry in request.items.items()
        }
        for table, listed in keys.items():
            self.sent.update((table, *k) for k in listed)
        response = super().batch_write_row(request)
        for table, listed in keys.items():
            answers = (response.table_of_put.get(table, []) + response.table_of_update.get(table, [])
                       + response.table_of_delete.get(table, []))
            for answer in answers:
                if answer.is_ok:
                    self.succeeded[(table, *listed[answer.index])] += 1
        return response

    def send_raw(self, step):
        """The model layer's own BatchWriteRow requests (``calls.Raw``), counted the same way."""
        answer = rawclient.send(self, step.api, step.body)
        if step.api != "BatchWriteRow":
            return answer
        request = pb.BatchWriteRowRequest.FromString(step.body)
        response = pb.BatchWriteRowResponse.FromString(answer)
        for entry, results in zip(request.tables, response.tables, strict=True):
            for row, result in zip(entry.rows, results.rows, strict=True):
                key = (entry.table_name, *(v for _, v in decode_row(row.row_change).primary_key))
                self.sent[key] += 1
                self.succeeded[key] += result.is_ok
        return answer

"""Raw protobuf calls for APIs the Python SDK lacks, signed and checked exactly like the SDK.

`call(client, "GetStreamRecord", request, pb.GetStreamRecordResponse)` builds the request headers
with the SDK client's own protocol object and signer, sends them on its connection, verifies the
response headers and signature as the SDK does, and raises `OTSServiceError` for an error body.
"""

from __future__ import annotations

from typing import Any, TypeVar

from tablestore import OTSClient, OTSServiceError
from tablestore.auth import RequestContext
from tablestore.protobuf import table_store_pb2 as pb

M = TypeVar("M")


def call(client: OTSClient, api: str, request: Any, response_cls: type[M]) -> M:
    protocol, signer = client.protocol, client._signer
    context = RequestContext(client.credentials_provider.get_credentials())
    query = "/" + api
    body = request.SerializeToString()
    headers = protocol._make_request_headers(body, query, signer, context)
    status, _, response_headers, response_body = client.connection.send_receive(query, headers, body)
    std = protocol._convert_urllib3_headers(response_headers)
    protocol._check_headers(std, response_body, status=status)
    protocol._check_authorization(query, std, status, signer, context)
    if status >= 300:
        error = pb.Error.FromString(response_body)
        raise OTSServiceError(status, error.code, error.message)
    return response_cls.FromString(response_body)  # type: ignore[attr-defined,no-any-return]

"""Raw protobuf calls for APIs the Python SDK lacks, signed and checked exactly like the SDK.

`call(client, "GetStreamRecord", request, pb.GetStreamRecordResponse)` builds the request headers
with the SDK client's own protocol object and signer, sends them on its connection, verifies the
response headers and signature as the SDK does, and raises `OTSServiceError` for an error body.
`read_response(sock)` reads one HTTP response off a raw socket, for tests that frame requests
themselves.
"""

from __future__ import annotations

import socket
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


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """Status and body of one response (the server closes the connection after a refusal)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in top.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return int(top.split(b" ")[1]), rest[:length]

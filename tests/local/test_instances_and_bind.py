"""Instance names a client sends cost nothing lasting (`--any-instance` remembers none, rate windows
are bounded), error messages do not repeat a huge name, and a server reachable from other
machines refuses the built-in secret."""

from __future__ import annotations

import base64
import hashlib
import http.client
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from refusedserve import refused_serve
from tablestore.auth import SignV2
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local.auth import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, Credentials
from tsmigrate.local.server import EmptySecret, InsecureBind, LocalServer, is_loopback
from tsmigrate.local.testing import LocalTablestore, local_tablestore

KiB = 1024


@pytest.fixture
def ots() -> Iterator[LocalTablestore]:
    with local_tablestore(memory=True) as running:
        yield running


class Caller:
    """Signed ListTable calls naming any instance, on one keep-alive connection."""

    def __init__(self, ots: LocalTablestore) -> None:
        url = urlparse(ots.endpoint)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        self.client = ots.client()

    def list_table(self, instance: str) -> tuple[int, pb.Error | None]:
        headers = {
            "x-ots-date": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "x-ots-apiversion": "2015-12-31",
            "x-ots-accesskeyid": DEFAULT_ACCESS_KEY_ID,
            "x-ots-instancename": instance,
            "x-ots-contentmd5": base64.b64encode(hashlib.md5(b"").digest()).decode(),
        }
        provider = self.client.credentials_provider
        context = type("Ctx", (), {"get_credentials": lambda self: provider.get_credentials()})()
        SignV2("utf-8").make_request_signature_and_add_headers("/ListTable", headers, context)
        self.conn.request("POST", "/ListTable", b"", headers)
        response = self.conn.getresponse()
        body = response.read()
        return response.status, None if response.status == 200 else pb.Error.FromString(body)


@pytest.mark.slow  # 2,000 requests with tracemalloc on (which slows the server too): 2 to 4 s
def test_any_instance_remembers_no_instance_name(ots: LocalTablestore) -> None:
    ots.server.options.allow_any_instance = True
    ots.server.options.table_ops_per_s = 1000  # per-instance rate windows, bounded too
    caller = Caller(ots)
    caller.list_table("warm-up")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        statuses = {caller.list_table(f"i{n:05d}" + "x" * (4 * KiB))[0] for n in range(2000)}
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert statuses == {200}
    assert ots.server.options.instances == {"local"}
    # 2,000 names of 4 KB were 8 MB and more when each was kept; at most the rate windows of the
    # 256 most recently active instances stay.
    assert grown < 3 * 1024 * KiB, f"grew {grown / KiB:.0f} KiB"


def test_the_wrong_instance_error_does_not_repeat_a_huge_name(ots: LocalTablestore) -> None:
    status, error = Caller(ots).list_table("n" * (10 * KiB))
    assert status == 403 and error is not None and error.code == "OTSAuthFailed"
    assert error.message == f"The instance is not found: {'n' * 64}... (10240 characters)."


def test_a_short_wrong_instance_is_named_in_full(ots: LocalTablestore) -> None:
    status, error = Caller(ots).list_table("nope")
    assert (status, error.message if error else None) == (403, "The instance is not found: nope.")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_serve_on_every_interface_with_the_built_in_secret_is_refused(host: str, tmp_path: Path) -> None:
    # In process ($TSMIGRATE_LOCAL_SECRET unset), with a watchdog that stops a server that wrongly
    # started (it would serve until signalled), so that it fails on its exit status.
    result = refused_serve(tmp_path, "--memory", "--port", "0", "--host", host)
    assert result.returncode == 2
    assert "--access-key-secret" in result.stderr and "reachable from other machines" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_non_loopback_bind_needs_a_secret_of_ones_own() -> None:
    with pytest.raises(InsecureBind):
        LocalServer(Credentials({DEFAULT_ACCESS_KEY_ID: DEFAULT_ACCESS_KEY_SECRET}), host="0.0.0.0")
    server = LocalServer(Credentials({DEFAULT_ACCESS_KEY_ID: "my-own-secret"}), host="0.0.0.0")
    server.close()  # accepted (closed at once: nothing is served beyond this machine)


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_serve_with_an_empty_secret_is_refused_on_any_bind(host: str, tmp_path: Path) -> None:
    # Refused on loopback too: the SDK itself refuses an empty secret, so only a hand-made client
    # could use such a server, and an empty value is nearly always an unset shell variable.
    result = refused_serve(tmp_path, "--memory", "--port", "0", "--host", host, "--access-key-secret", "")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--access-key-secret" in errors[0] and "is empty" in errors[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_an_empty_secret_variable_is_refused_not_taken_for_unset(tmp_path: Path) -> None:
    # Issue 38 item 5: click takes an empty $TSMIGRATE_LOCAL_SECRET for an unset one, and served
    # the built-in secret; whoever set it meant to give one.
    empty = {"TSMIGRATE_LOCAL_SECRET": ""}
    result = refused_serve(tmp_path, "--memory", "--port", "0", extra_env=empty)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: Invalid value for --access-key-secret: $TSMIGRATE_LOCAL_SECRET is set "
                      "but empty: set it to the secret to serve with, or unset it to serve with the "
                      "built-in one (loopback only)"]
    assert "Traceback" not in result.stderr and result.stdout == ""
    # The option, given, is the secret: the variable does not matter then (served, then stopped).
    served = refused_serve(tmp_path, "--memory", "--port", "0", "--access-key-secret", "mine",
                           timeout_s=0.2, extra_env=empty)
    assert served.returncode == 0 and served.stdout.startswith("http://127.0.0.1:"), served.stderr


def test_an_empty_secret_is_refused_by_the_library_too() -> None:
    with pytest.raises(EmptySecret):
        LocalServer(Credentials({"ak": "good", DEFAULT_ACCESS_KEY_ID: ""}))


def test_loopback_hosts() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "", "192.0.2.1"]))

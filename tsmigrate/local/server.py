"""The local server: authentication, dispatch of API names to handlers, runtime knobs, and signed
responses shaped exactly as the SDK checks them (`protocol._check_headers` / `_check_authorization`).
"""

from __future__ import annotations

import collections
import contextlib
import ipaddress
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from google.protobuf.message import DecodeError, Message
from tablestore.protobuf import table_store_pb2 as pb

from tsmigrate.local import (
    columns,
    indexes,
    rows,
    searchapi,
    splits,
    streams,
    tables,
    transactions,
)
from tsmigrate.local.auth import Caller, Credentials, verify_request
from tsmigrate.local.context import Context, Handler, HookScope, MutationHook, ServerOptions
from tsmigrate.local.errors import OTSError, auth_failed, echo, invalid
from tsmigrate.local.filters import FilterError
from tsmigrate.local.model import TableInfo
from tsmigrate.local.ownership import EMBEDDED_ROLE, Holder, Ownership
from tsmigrate.local.search import ScanSessions
from tsmigrate.local.storage import Storage, describe_disk_failure, is_disk_failure
from tsmigrate.local.transport import HTTPServer, Limits, Request, Response
from tsmigrate.local.txn_registry import Transactions
from tsmigrate.local.utf8 import check_utf8
from tsmigrate.wire.plainbuffer import PlainBufferError
from tsmigrate.wire.signing import DEFAULT_ACCESS_KEY_SECRET, content_md5, sign_response

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
TABLE_OPS_WINDOW_S = 1.0
RATE_WINDOWS_MAX = 256  # instances whose recent table operations are remembered (LRU)
TABLE_OPS = frozenset(
    {"CreateTable", "DeleteTable", "UpdateTable", "DescribeTable", "ListTable", "CreateIndex",
     "DropIndex", "AddDefinedColumn", "DeleteDefinedColumn"}
)
HANDLERS: dict[str, tuple[type[Message], Handler]] = {
    **tables.HANDLERS, **rows.HANDLERS, **streams.HANDLERS, **splits.HANDLERS, **columns.HANDLERS,
    **searchapi.HANDLERS, **indexes.HANDLERS, **transactions.HANDLERS,
}


class InsecureBind(ValueError):
    """A server reachable from other machines must not accept the built-in (public) secret."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"binding {host or 'every interface'} makes the server reachable from other machines, "
            "and its secret is the built-in one anybody knows: give your own with "
            "--access-key-secret or $TSMIGRATE_LOCAL_SECRET, or bind 127.0.0.1"
        )


class EmptySecret(ValueError):
    """No client of the service signs with an empty secret (the SDK refuses one, Alibaba Cloud
    issues none), so an empty one is a mistake, mostly an unset variable, on any bind: refused
    rather than served with a key anybody can sign with."""

    def __init__(self, access_key_id: str) -> None:
        super().__init__(
            f"the secret of access key {access_key_id!r} is empty: give a non-empty one with "
            "--access-key-secret or $TSMIGRATE_LOCAL_SECRET (unset: the built-in one, loopback only)"
        )


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host:
        return False  # "" binds every interface
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


class LocalServer:
    def __init__(
        self,
        credentials: Credentials,
        data_dir: str | None = None,
        options: ServerOptions | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        role: str = "local server",
    ) -> None:
        """`role` says who this is in the note a data directory's owner publishes (a second
        process on the directory is refused with it, or talks to this server)."""
        empty = [key_id for key_id, secret in credentials.keys.items() if not secret]
        if empty:
            raise EmptySecret(empty[0])
        if not is_loopback(host) and DEFAULT_ACCESS_KEY_SECRET in credentials.keys.values():
            raise InsecureBind(host)
        self.credentials = credentials
        self.options = options or ServerOptions()
        self.role = role
        # The last write the disk refused (one line naming it), for a command to report.
        self.disk_failure: str | None = None
        # Taken first and held until close(): raises DataDirInUse when a live server has it.
        self._ownership = Ownership.acquire(data_dir) if data_dir is not None else None
        try:
            self._http = HTTPServer(host, port, self.handle, MAX_BODY, self.precheck)
            try:
                self.storage = Storage(data_dir)
            except BaseException:
                self._http.close()
                raise
        except BaseException:
            if self._ownership is not None:
                self._ownership.release()
            raise
        self.scan_sessions = ScanSessions(self.options.search_splits_size)
        self.transactions = Transactions()
        self.mutation_hooks: list[MutationHook] = []  # run for writes to every table
        self._table_hooks: list[tuple[HookScope, MutationHook]] = []
        # The clock of data (cell timestamps, TTL, versions): `clock() + clock_offset` seconds.
        # Tests move time with `clock_offset`, or replace `clock` to stop it (same-ms writes).
        self.clock: Callable[[], float] = time.time
        self.clock_offset = 0.0
        self._table_ops: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )
        self._rate_lock = threading.Lock()
        # Response request ids: uuid4-shaped, a random prefix per server then a counter (unique
        # as uuid4 would be, without reading os.urandom for every response).
        self._request_prefix = str(uuid.uuid4())[:24]
        self._request_ids = itertools.count()
        streams.install(self)
        self.add_table_hook(indexes.maintained, indexes.on_mutation)
        if self._ownership is not None:
            self._ownership.publish(self._holder(role))

    def _holder(self, role: str) -> Holder:
        key_id, secret = next(iter(self.credentials.keys.items()), ("", ""))
        return Holder(
            pid=os.getpid(),
            role=role,
            endpoint=self.local_endpoint,
            instances=tuple(sorted(self.options.instances)),
            any_instance=self.options.allow_any_instance,
            access_key_id=key_id,
            default_secret=secret == DEFAULT_ACCESS_KEY_SECRET,
        )

    @property
    def endpoint(self) -> str:
        return f"http://{self._http.host}:{self._http.port}"

    @property
    def local_endpoint(self) -> str:
        """The endpoint for clients on this machine (a wildcard bind is reached on loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self._http.host, self._http.host)
        return f"http://{host}:{self._http.port}" if ":" not in host else f"http://[{host}]:{self._http.port}"

    @property
    def limits(self) -> Limits:
        """What one client may cost (connections, timeouts); change them while it runs."""
        return self._http.limits

    def start(self) -> LocalServer:
        self._http.start()
        return self

    def close(self) -> None:
        self._http.close()
        self.storage.close()
        if self._ownership is not None:
            self._ownership.release()

    def now(self) -> float:
        return self.clock() + self.clock_offset

    def add_instance(self, name: str) -> None:
        self.options.instances.add(name)

    def add_table_hook(self, scope: HookScope, hook: MutationHook) -> None:
        """Run `hook` after mutations of the tables `scope` accepts (checked on every write, so
        it may follow table settings). Writes to other tables keep the fast path: no read of the
        old row, no per-row savepoint in batches."""
        self._table_hooks.append((scope, hook))

    def hooks_for(self, table: TableInfo) -> list[MutationHook]:
        """The mutation hooks that apply to writes of `table`."""
        if not self._table_hooks:
            return self.mutation_hooks
        scoped = [hook for scope, hook in self._table_hooks if scope(table)]
        return self.mutation_hooks + scoped if scoped else self.mutation_hooks

    # -- request handling ------------------------------------------------------------------------

    def precheck(self, req: Request) -> Response | None:
        """What the headers alone decide, asked by the transport before it reads a large body:
        an answer refuses the request unread, None lets the body be read."""
        api, query = _api_and_query(req.path)
        caller: Caller | None = None
        try:
            caller = self._authenticate(req, api, query, None)
            req.authenticated = True  # the transport trusts the connection (it knows the secret)
            self._route(api, caller)
            return None
        except OTSError as e:
            body = _error_body(e.code, e.message)
            return e.status, self._headers(api, body, caller), body

    def handle(self, req: Request) -> Response:
        start = time.monotonic()
        api, query = _api_and_query(req.path)
        caller: Caller | None = None
        try:
            caller = self._authenticate(req, api, query, req.body)
            req.authenticated = True
            request_cls, handler = self._route(api, caller)
            self._admit(api, caller.instance, self.now())
            message = request_cls()
            try:
                message.ParseFromString(req.body)
            except DecodeError:
                raise invalid("Failed to parse the ProtoBuf message.") from None
            check_utf8(message)
            # A request is applied at one instant, taken once it holds the storage: versions are
            # stamped in the order writes commit, so a write that waited for the lock can never
            # be stamped older than one committed meanwhile (see `rows.update_one` for increments).
            # Read-only handlers in LOCKS_ITSELF hold the lock for their reads only.
            lock = contextlib.nullcontext() if api in searchapi.LOCKS_ITSELF else self.storage.lock
            with lock:
                ctx = Context(self, caller.instance, api, self.now())
                result = handler(ctx, message)
            if self.options.faults is not None and (lost := self.options.faults.reply_error(api)):
                raise lost
            status = 200
            body = result if isinstance(result, bytes) else result.SerializeToString()
        except OTSError as e:
            status, body = e.status, _error_body(e.code, e.message)
        except PlainBufferError as e:
            status, body = 400, _error_body("OTSParameterInvalid", f"Invalid PlainBuffer: {e}")
        except FilterError as e:
            status, body = 400, _error_body("OTSParameterInvalid", str(e))
        except RecursionError:
            # A request nested deeper than a limit checks for: refused, one log line (a
            # traceback this deep is hundreds of KB for each request).
            log.warning("refused %s: the request is nested too deeply", api)
            status, body = 400, _error_body("OTSParameterInvalid", "The request is nested too deeply.")
        except Exception as e:
            if is_disk_failure(e):
                status, body = self._disk_failure(api, e)
            else:
                log.exception("internal error serving %s", api)
                status, body = 500, _error_body("OTSInternalServerError", "Internal server error.")
        latency = self.options.latency_ms / 1000.0 - (time.monotonic() - start)
        if latency > 0:
            time.sleep(latency)
        return status, self._headers(api, body, caller), body

    def _disk_failure(self, api: str, error: Exception) -> tuple[int, bytes]:
        """A request SQLite could not write (full or failing disk). Its transaction was rolled
        back, so the request was not done: answered as the service answers a write it cannot take
        now, 503 OTSServerBusy "Server is busy." (retryable on every API: tablestore-spec.md
        §6.10, §6.11), never a 500 with a traceback. Logged in one line naming the disk, except
        by a command's embedded instance, whose command reports it (`disk_failure`)."""
        self.disk_failure = describe_disk_failure(self.storage.data_dir, error)
        # The reserve goes now, so that the bookkeeping after this failure can still be written.
        self.storage.release_reserve()
        if self.role != EMBEDDED_ROLE:
            log.error("%s refused: %s", api, self.disk_failure)
        return 503, _error_body("OTSServerBusy", "Server is busy.")

    def _authenticate(self, req: Request, api: str, query: str, body: bytes | None) -> Caller:
        """Method, size and signature (`body` None: not read yet, so its MD5 is not checked)."""
        if req.method != "POST":
            raise OTSError(405, "OTSMethodNotAllowed", "Only POST method for requests is supported.")
        if req.body_too_large:
            raise OTSError(413, "OTSRequestBodyTooLarge", "The size of POST data is too large.")
        # The clock offset moves data time (TTL, versions) only, not the signature check.
        return verify_request("/" + api, query, req.headers, body, self.credentials, time.time())

    def _route(self, api: str, caller: Caller) -> tuple[type[Message], Handler]:
        self._check_instance(caller.instance)
        entry = HANDLERS.get(api)
        if entry is None:
            raise invalid(f"Unsupported operation: {echo(api)}.")
        return entry

    def _check_instance(self, instance: str) -> None:
        # Any instance is accepted without being remembered: a client naming a new one on every
        # request must not grow the server (its tables, if it creates any, are data).
        if self.options.allow_any_instance or instance in self.options.instances:
            return
        raise auth_failed(f"The instance is not found: {echo(instance)}.")

    def _admit(self, api: str, instance: str, now: float) -> None:
        """Injected faults and the table-operation rate limit, before anything is done."""
        opts = self.options
        if opts.faults is not None:
            error = opts.faults.request_error(api)
            if error is not None:
                raise error
        if opts.table_ops_per_s > 0 and api in TABLE_OPS:
            with self._rate_lock:
                window = self._table_ops.get(instance)
                if window is None:
                    if len(self._table_ops) >= RATE_WINDOWS_MAX:
                        self._table_ops.popitem(last=False)  # the least recently active instance
                    window = self._table_ops[instance] = collections.deque()
                else:
                    self._table_ops.move_to_end(instance)
                while window and now - window[0] >= TABLE_OPS_WINDOW_S:
                    window.popleft()
                if len(window) >= opts.table_ops_per_s:
                    raise OTSError(403, "OTSQuotaExhausted", "Too frequent table operations.")
                window.append(now)

    def _headers(self, api: str, body: bytes, caller: Caller | None) -> list[tuple[str, str]]:
        t = time.time()
        date = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"
        ots = {
            "x-ots-contentmd5": content_md5(body),
            "x-ots-requestid": f"{self._request_prefix}{next(self._request_ids):012x}",
            "x-ots-date": date,
            "x-ots-contenttype": "protocol buffer",
        }
        headers = list(ots.items())
        if caller is not None:
            signature = sign_response(caller.signing_key, "/" + api, ots)
            headers.append(("Authorization", f"OTS {caller.access_key_id}:{signature}"))
        return headers


def _api_and_query(path: str) -> tuple[str, str]:
    uri, _, query = path.partition("?")
    return uri.rsplit("/", 1)[-1], query


def _error_body(code: str, message: str) -> bytes:
    return pb.Error(code=code, message=message).SerializeToString()

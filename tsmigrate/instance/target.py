"""Which instance a command talks to, and a connection to it.

In order of precedence: ``--endpoint URL --instance NAME``; ``--target NAME`` (a named target in
``[tool.tsmigrate.targets.NAME]`` with ``endpoint`` and ``instance``); the environment
(``TSMIGRATE_ENDPOINT`` / ``TSMIGRATE_INSTANCE``). Credentials come only from the environment
(``ALIBABA_CLOUD_ACCESS_KEY_ID``, ``ALIBABA_CLOUD_ACCESS_KEY_SECRET``, optional
``ALIBABA_CLOUD_SECURITY_TOKEN``), never from files or flags, and are never printed.

With nothing configured, the target is the embedded local instance: a local Tablestore-compatible
server started in this process over the data kept under ``.tsmigrate/local`` in the project, or,
when a ``tsmigrate local serve`` already runs on that directory, that server (the data is opened
by one process only; another command's embedded instance is waited for).

An endpoint given (either way) that is the project's running ``tsmigrate local serve`` (what
``export $(tsmigrate local endpoint)`` sets) is talked to with the key the embedded instance would
use to join it: the built-in one when it serves with that, else the environment's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from tsmigrate.errors import ConfigError, StepFailed, TsmigrateError
from tsmigrate.instance.pacing import paced
from tsmigrate.schema.config import Project

LOCAL_DATA = Path(".tsmigrate") / "local"
LOCAL_INSTANCE = "local"
SERVICE_TABLE_OPS_PER_S = 10  # the service's documented limit per instance
# Target.name of an endpoint given by --endpoint/--instance, or by the environment.
COMMAND_LINE = "command line"
ENVIRONMENT = "environment"
ENV_VARIABLES = "TSMIGRATE_ENDPOINT/TSMIGRATE_INSTANCE"


@attrs.frozen
class Target:
    endpoint: str | None  # None: the embedded local instance
    instance: str
    name: str
    # Pace table-level calls to this many per second (None: no pacing, as for the local server).
    table_ops_per_s: int | None = SERVICE_TABLE_OPS_PER_S
    # The embedded instance's data directory (its project's .tsmigrate/local).
    data_dir: Path | None = None

    @property
    def embedded(self) -> bool:
        return self.endpoint is None

    @property
    def identity(self) -> str:
        """What a plan file records to be applied only where it was made: the endpoint and
        instance, or for an embedded instance its project's data directory and instance (each
        project's embedded instance is another one)."""
        if self.embedded:
            return f"local:{self.data_dir or LOCAL_DATA}#{self.instance}"
        return f"{self.endpoint}#{self.instance}"

    def describe(self) -> str:
        if self.embedded:
            return f"embedded local instance '{self.instance}'"
        if self.name == COMMAND_LINE:
            return f"{self.endpoint} (instance '{self.instance}')"
        if self.name == ENVIRONMENT:
            return f"{self.endpoint} (instance '{self.instance}', from {ENV_VARIABLES})"
        return f"{self.name} ({self.endpoint}, instance '{self.instance}')"


@attrs.frozen
class TargetChoice:
    """The instance a command was pointed at: ``--target NAME``, or ``--endpoint`` with
    ``--instance``; nothing given means the project's default (the embedded local instance)."""

    name: str | None = None
    endpoint: str | None = None
    instance: str | None = None

    def resolve(self, project: Project) -> Target:
        return resolve_target(project, target=self.name, endpoint=self.endpoint, instance=self.instance)


def resolve_target(
    project: Project,
    *,
    target: str | None = None,
    endpoint: str | None = None,
    instance: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Target:
    if endpoint or instance:
        if not (endpoint and instance):
            raise ConfigError("--endpoint and --instance go together; give both")
        return Target(endpoint, instance, COMMAND_LINE)
    if target:
        targets = project.settings.get("targets", {})
        if target not in targets:
            known = ", ".join(sorted(targets)) or "none configured"
            raise ConfigError(
                f"unknown target {target!r} (known: {known}); declare it in pyproject.toml as "
                f"[tool.tsmigrate.targets.{target}] with endpoint and instance"
            )
        spec = targets[target]
        if not isinstance(spec, dict):
            raise ConfigError(f"[tool.tsmigrate.targets.{target}] must be a table")
        if target == "local" and not spec.get("endpoint"):
            return Target(None, spec.get("instance", LOCAL_INSTANCE), target, None,
                          project.root / LOCAL_DATA)
        if not spec.get("endpoint") or not spec.get("instance"):
            raise ConfigError(f"target {target!r} needs both endpoint and instance")
        rate = spec.get("table_ops_per_s", SERVICE_TABLE_OPS_PER_S)
        if not isinstance(rate, int) or isinstance(rate, bool) or rate < 0:
            raise ConfigError(f"target {target!r}: table_ops_per_s must be a whole number (0: no pacing)")
        return Target(spec["endpoint"], spec["instance"], target, rate or None)
    env_endpoint = environ.get("TSMIGRATE_ENDPOINT")
    env_instance = environ.get("TSMIGRATE_INSTANCE")
    if env_endpoint or env_instance:
        if not (env_endpoint and env_instance):
            raise ConfigError("set both TSMIGRATE_ENDPOINT and TSMIGRATE_INSTANCE, or neither")
        return Target(env_endpoint, env_instance, ENVIRONMENT)
    return Target(None, LOCAL_INSTANCE, "local", None, project.root / LOCAL_DATA)


_SET_CREDENTIALS = ("set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET "
                    "(and ALIBABA_CLOUD_SECURITY_TOKEN for STS) in the environment")


def credentials(environ: Mapping[str, str] = os.environ) -> tuple[str, str, str | None]:
    key_id = environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID")
    secret = environ.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
    if not key_id or not secret:
        raise ConfigError(f"no credentials: {_SET_CREDENTIALS}")
    return key_id, secret, environ.get("ALIBABA_CLOUD_SECURITY_TOKEN") or None


@contextmanager
def connect(project: Project, target: Target, **client_options: Any) -> Iterator[Any]:
    """An OTSClient for the target, its table-level calls paced to the target's limit; for the
    embedded instance, the server runs meanwhile."""
    from tablestore import OTSClient

    from tsmigrate.instance.retry import install

    if target.embedded:
        from tsmigrate.local.embedded import WAIT_S, embedded_instance
        from tsmigrate.local.ownership import DataDirInUse
        from tsmigrate.local.storage import StorageFormatError, StorageUnwritable
        from tsmigrate.local.testing import LocalTablestore

        data_dir = target.data_dir or project.root / LOCAL_DATA
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            with embedded_instance(str(data_dir), target.instance, on_wait=_say_waiting) as found:
                if isinstance(found, LocalTablestore):
                    client = found.client(**{"retry_policy": _embedded_retry_policy(found.server),
                                             **client_options})
                else:
                    client = _running_server_client(found, target.instance, client_options)
                try:
                    yield install(paced(client, target.table_ops_per_s))
                except Exception as exc:
                    failure = getattr(found, "server", None) and found.server.disk_failure
                    if failure:
                        raise _disk_error(exc, failure) from exc
                    raise
        except DataDirInUse as e:
            raise ConfigError(f"{e} (gave up after waiting {WAIT_S:.0f} s)") from None
        except StorageUnwritable as e:
            raise LocalDataUnwritable(str(e)) from None
        except StorageFormatError as e:
            raise ConfigError(str(e)) from None
        return
    holder = _project_server_at(project, target.endpoint or "")
    if holder is not None:
        client = _running_server_client(holder, target.instance, client_options)
    else:
        key_id, secret, token = _target_credentials(target)
        client = OTSClient(target.endpoint, key_id, secret, target.instance, sts_token=token,
                           **client_options)
    yield install(paced(client, target.table_ops_per_s))


def _target_credentials(target: Target) -> tuple[str, str, str | None]:
    """The environment's credentials; missing, the error names the target and where it came
    from (an exported TSMIGRATE_ENDPOINT outlives the server it named)."""
    try:
        return credentials()
    except ConfigError:
        pass
    if target.name != ENVIRONMENT:
        raise ConfigError(f"no credentials for {target.describe()}: {_SET_CREDENTIALS}")
    raise ConfigError(
        f"no credentials for {target.describe()}: {_SET_CREDENTIALS}, or unset "
        f"TSMIGRATE_ENDPOINT and TSMIGRATE_INSTANCE to use the embedded local instance (it joins "
        f"the `tsmigrate local serve` running on the project's {LOCAL_DATA} by itself)"
    )


def _project_server_at(project: Project, endpoint: str) -> Any:
    """The project's running `tsmigrate local serve` (its `ownership.Holder`) when it serves at
    ``endpoint``, else None."""
    from tsmigrate.local.ownership import project_server

    holder = project_server(project.root)
    if holder is None or _endpoint_key(holder.endpoint) != _endpoint_key(endpoint):
        return None
    return holder


def _endpoint_key(endpoint: str) -> tuple[str, str, int | None]:
    """An endpoint as compared: scheme, host (localhost as 127.0.0.1) and port."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(endpoint.strip())
        port = parts.port
    except ValueError:
        return ("", endpoint, None)
    host = (parts.hostname or "").lower()
    return (parts.scheme.lower(), "127.0.0.1" if host == "localhost" else host, port)


class LocalDataUnwritable(TsmigrateError):
    """The embedded instance's disk refused a write (full or failing): names the directory."""


def _disk_error(exc: Exception, failure: str) -> TsmigrateError:
    """What a command that failed on the embedded instance's full disk reports: one line naming
    the disk; a failed apply keeps saying which step failed and what was done before it."""
    if isinstance(exc, StepFailed):
        # The server's answer ("Server is busy.") says nothing the disk's message does not.
        return exc.with_cause(failure if "OTSServerBusy" in exc.cause else f"{exc.cause} ({failure})")
    return LocalDataUnwritable(failure)


def _embedded_retry_policy(server: Any) -> Any:
    """tsmigrate's retry policy, except that a request the embedded instance refused for its full
    disk is not sent again: the disk will not empty itself while the command waits, so the
    command stops at once and says so (`LocalDataUnwritable`)."""
    from tsmigrate.instance.retry import TsmigrateRetryPolicy  # imported late, as the SDK is

    class EmbeddedRetryPolicy(TsmigrateRetryPolicy):
        # Callers that loop themselves (adapter.execute) read max_retries: none after a failure.
        @property  # type: ignore[override]
        def max_retries(self) -> int:
            return 0 if server.disk_failure is not None else self._max_retries

        @max_retries.setter
        def max_retries(self, value: int) -> None:
            self._max_retries = value

        def should_retry(self, retry_times: int, exception: BaseException, api_name: str) -> bool:
            return server.disk_failure is None and super().should_retry(retry_times, exception, api_name)

    return EmbeddedRetryPolicy()


def _say_waiting(holder: Any) -> None:
    who = holder.describe() if holder is not None else "another process"
    print(f"waiting for {who} to release {LOCAL_DATA}", file=sys.stderr, flush=True)


def _running_server_client(holder: Any, instance: str, client_options: dict[str, Any]) -> Any:
    """A client of the local server already running on the embedded instance's data (`holder`
    is its `ownership.Holder`): the data is opened by one process only."""
    from tablestore import OTSClient

    from tsmigrate.wire.signing import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET

    where = f"the local server running on {LOCAL_DATA} ({holder.describe()})"
    if not holder.serves(instance):
        served = ", ".join(holder.instances)
        raise ConfigError(
            f"{where} serves instance(s) {served}, not {instance!r}: restart it with "
            f"--instance {instance} (or --any-instance), or stop it"
        )
    if holder.default_secret and holder.access_key_id == DEFAULT_ACCESS_KEY_ID:
        key_id, secret, token = DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET, None
    else:
        try:
            key_id, secret, token = credentials()
        except ConfigError:
            key_id = secret = ""
        if key_id != holder.access_key_id:
            raise ConfigError(
                f"{where} uses its own access key ({holder.access_key_id!r}): set "
                "ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET to it, or stop it"
            )
    return OTSClient(holder.endpoint, key_id, secret, instance, sts_token=token, **client_options)

"""`tsmigrate local ...`: run the local, Tablestore-compatible server."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import click

from tsmigrate.local.auth import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET
from tsmigrate.local.faults import HELP as FAULT_HELP

SECRET_VARIABLE = "TSMIGRATE_LOCAL_SECRET"


@click.group()
def local() -> None:
    """Run a local, Tablestore-compatible server."""


# short_help: the group lists the first sentence whole (click would cut this one mid-sentence).
@local.command(short_help="Serve the Tablestore wire protocol until SIGINT/SIGTERM.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; any other than loopback needs your own --access-key-secret.",
)
@click.option("--port", default=8801, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free port).")
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False),
    help="Directory holding the data (kept across restarts).",
)
@click.option("--memory", is_flag=True, help="Keep data in memory only (the default without --data).")
@click.option("--instance", default="local", show_default=True, help="Instance name clients use.")
@click.option("--any-instance", is_flag=True, help="Accept any instance name (each one separate).")
@click.option("--access-key-id", default=DEFAULT_ACCESS_KEY_ID, show_default=True)
@click.option(
    "--access-key-secret",
    default=DEFAULT_ACCESS_KEY_SECRET,
    envvar=SECRET_VARIABLE,
    help="Secret of the access key (or $TSMIGRATE_LOCAL_SECRET); default: the built-in one.",
)
@click.option("--sts-token", help="Also accept this STS token with the access key.")
@click.option("--latency-ms", default=0.0, type=float, help="Added latency per request.")
@click.option(
    "--table-ops-per-s",
    default=0,
    type=int,
    help="Limit table operations per second per instance (the service allows 10); 0: no limit.",
)
@click.option(
    "--cu-adjust-interval-s",
    default=120.0,
    show_default=True,
    type=float,
    help="Minimum spacing of reserved-throughput changes per table.",
)
@click.option("--fault", "fault_spec", default="", help=FAULT_HELP)
@click.option(
    "--stream-shards",
    default=1,
    show_default=True,
    # 64: context.MAX_STREAM_SHARDS (not imported here: it loads the SDK's modules).
    type=click.IntRange(1, 64),
    help="Shards a table's stream starts with, one per partition, splitting the keys evenly "
    "(1: one shard over every key).",
)
def serve(
    host: str,
    port: int,
    data_dir: str | None,
    memory: bool,
    instance: str,
    any_instance: bool,
    access_key_id: str,
    access_key_secret: str,
    sts_token: str | None,
    latency_ms: float,
    table_ops_per_s: int,
    cu_adjust_interval_s: float,
    fault_spec: str,
    stream_shards: int,
) -> None:
    """Serve the Tablestore wire protocol until SIGINT/SIGTERM; prints the endpoint when ready."""
    # The SDK (whose protobuf modules we use) warns at import about its optional native codecs.
    logging.getLogger("tablestore").addHandler(logging.NullHandler())
    from tsmigrate.local.auth import Credentials
    from tsmigrate.local.context import ServerOptions
    from tsmigrate.local.faults import FaultPlan
    from tsmigrate.local.ownership import SERVE_ROLE, DataDirInUse
    from tsmigrate.local.server import EmptySecret, InsecureBind, LocalServer
    from tsmigrate.local.storage import StorageFormatError, StorageUnwritable

    if data_dir and memory:
        raise click.UsageError("--data and --memory are mutually exclusive")
    _refuse_empty_secret_variable()
    try:
        faults = FaultPlan.parse(fault_spec) if fault_spec else None
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--fault") from None
    options = ServerOptions(
        latency_ms=latency_ms,
        table_ops_per_s=table_ops_per_s,
        cu_adjust_interval_s=cu_adjust_interval_s,
        faults=faults,
        allow_any_instance=any_instance,
        instances={instance},
        stream_shards=stream_shards,
    )
    tokens = {sts_token: access_key_id} if sts_token else {}
    credentials = Credentials({access_key_id: access_key_secret}, tokens)
    try:
        server = LocalServer(
            credentials, data_dir=data_dir, options=options, host=host, port=port, role=SERVE_ROLE
        )
    except DataDirInUse as e:
        raise click.ClickException(str(e)) from None
    except InsecureBind as e:
        raise click.UsageError(str(e)) from None
    except EmptySecret as e:
        raise click.BadParameter(str(e), param_hint="--access-key-secret") from None
    except (StorageUnwritable, StorageFormatError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        if e.filename is not None:  # the data directory, not the socket (bind errors name no file)
            raise click.ClickException(
                f"cannot use --data {data_dir}: {e.strerror}: {e.filename}"
            ) from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.start()
    where = data_dir or "memory"
    click.echo(f"instance {instance}, access key id {access_key_id}, data in {where}", err=True)
    click.echo(server.endpoint)
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    server.close()
    click.echo("stopped", err=True)


def _refuse_empty_secret_variable() -> None:
    """$TSMIGRATE_LOCAL_SECRET set but empty: click takes an empty variable for an unset one and
    would serve the built-in secret; whoever set it meant to give one (an unset variable
    expanded, mostly), so it is refused like an empty --access-key-secret."""
    import os

    source = click.get_current_context().get_parameter_source("access_key_secret")
    if os.environ.get(SECRET_VARIABLE) == "" and source is click.core.ParameterSource.DEFAULT:
        raise click.BadParameter(
            f"${SECRET_VARIABLE} is set but empty: set it to the secret to serve with, or unset "
            "it to serve with the built-in one (loopback only)",
            param_hint="--access-key-secret",
        )


@local.command(short_help="Print the endpoint and instance of the project's running local server.")
@click.option("--project", type=click.Path(file_okay=False), default=None,
              help="Project directory (default: the one holding the nearest pyproject.toml).")
@click.option("--format", "fmt", type=click.Choice(["env", "json"]), default="env", show_default=True,
              help="env: TSMIGRATE_ENDPOINT=... and TSMIGRATE_INSTANCE=... lines (for export); "
                   "json: endpoint, instance, instances, access_key_id, pid.")
def endpoint(project: str | None, fmt: str) -> None:
    """Print the endpoint and instance of the `tsmigrate local serve` running on the project's
    .tsmigrate/local (the one commands join); exit 1 when none runs there."""
    import json

    from tsmigrate.local.ownership import project_server

    root = _project_root(project)
    holder = project_server(root)
    if holder is None:
        raise click.ClickException(
            f"no tsmigrate local serve runs on {root / '.tsmigrate' / 'local'}: start one with "
            f"tsmigrate local serve --data {root / '.tsmigrate' / 'local'}"
        )
    instance = holder.instances[0] if holder.instances else "local"
    if fmt == "json":
        click.echo(json.dumps({"endpoint": holder.endpoint, "instance": instance,
                               "instances": list(holder.instances), "access_key_id": holder.access_key_id,
                               "pid": holder.pid}, indent=2))
    else:
        click.echo(f"TSMIGRATE_ENDPOINT={holder.endpoint}\nTSMIGRATE_INSTANCE={instance}")


def _project_root(project: str | None) -> Path:
    """The project directory as other commands find it (the nearest pyproject.toml), else the
    working directory."""
    from tsmigrate.errors import TsmigrateError
    from tsmigrate.schema.config import load_project

    if project is not None:
        return Path(project)
    try:
        return load_project(None).root
    except TsmigrateError:
        return Path.cwd()

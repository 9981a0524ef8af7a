"""One data directory, one owner: an OS file lock, and a note saying who holds it and where.

A server opening a data directory takes an exclusive `flock` on `owner.lock` in it, held as long
as the server runs. The OS drops the lock when the process dies however it dies, so a dead
owner's directory is taken over by the next one; a live owner's is refused. The owner publishes
`owner.json` (pid, endpoint, instances, access key id, role; never a secret), replaced atomically,
so another process can name the holder or talk to it instead (see `tsmigrate.instance.target.connect`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

LOCK_FILE = "owner.lock"
HOLDER_FILE = "owner.json"
SERVE_ROLE = "tsmigrate local serve"
# An embedded instance lives for one command: others wait for it rather than talk to it.
EMBEDDED_ROLE = "embedded instance of a tsmigrate command"


@dataclass(frozen=True)
class Holder:
    """Who holds a data directory, as it published itself."""

    pid: int
    role: str  # "tsmigrate local serve", "embedded instance", ...
    endpoint: str
    instances: tuple[str, ...]
    any_instance: bool
    access_key_id: str
    default_secret: bool  # the built-in secret (so a client knows it without being told)

    def describe(self) -> str:
        return f"pid {self.pid}, {self.role}, {self.endpoint}"

    @property
    def joinable(self) -> bool:
        """Whether others may talk to it: it serves until stopped, not for one command."""
        return self.role != EMBEDDED_ROLE

    def serves(self, instance: str) -> bool:
        return self.any_instance or instance in self.instances


class DataDirInUse(Exception):
    """The data directory is held by another live server (`holder`; None when it has not said
    who it is yet)."""

    def __init__(self, data_dir: str, holder: Holder | None) -> None:
        self.data_dir = data_dir
        self.holder = holder
        who = holder.describe() if holder is not None else "another process (starting up)"
        super().__init__(
            f"data directory {data_dir} is in use by {who}; "
            "stop it, talk to it, or use another directory"
        )


class Ownership:
    """The lock on one data directory, held until `release()`."""

    def __init__(self, data_dir: str, fd: int) -> None:
        self.data_dir = data_dir
        self._fd = fd

    @classmethod
    def acquire(cls, data_dir: str) -> Ownership:
        """Take the directory, or raise `DataDirInUse` naming its live holder."""
        os.makedirs(data_dir, exist_ok=True)
        fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirInUse(data_dir, read_holder(data_dir)) from None
        # A note left by a dead owner says nothing true any more.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(data_dir, HOLDER_FILE))
        return cls(data_dir, fd)

    def publish(self, holder: Holder) -> None:
        """Say who holds the directory and where it serves (atomically: readers see all or none)."""
        path = Path(self.data_dir) / HOLDER_FILE
        tmp = path.with_name(f".{HOLDER_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(holder)))
        os.replace(tmp, path)

    def release(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.data_dir, HOLDER_FILE))
        os.close(self._fd)  # drops the lock
        self._fd = -1


def read_holder(data_dir: str, wait_s: float = 2.0) -> Holder | None:
    """The live holder's published note; waits up to `wait_s` for an owner that is starting up.
    None when the note is missing or left by a dead process."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = _read_note(data_dir)
        if holder is not None or time.monotonic() >= deadline:
            return holder
        time.sleep(0.05)


def _read_note(data_dir: str) -> Holder | None:
    try:
        raw = json.loads(Path(data_dir, HOLDER_FILE).read_text())
        holder = Holder(**{**raw, "instances": tuple(raw["instances"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return holder if _alive(holder.pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def project_server(project_root: str | Path = ".") -> Holder | None:
    """The `tsmigrate local serve` running on a project's own local data (``.tsmigrate/local``
    under ``project_root``), as it published itself (endpoint, instances, access key id); None
    when none runs there (an embedded instance of a running command serves that command only).
    What a script reaching the project's local server needs, without reading `owner.json`."""
    holder = _read_note(str(Path(project_root) / ".tsmigrate" / "local"))
    return holder if holder is not None and holder.joinable else None

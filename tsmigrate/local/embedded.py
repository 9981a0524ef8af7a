"""The local instance a command uses over a data directory: its own server, or the running one.

A command (`tsmigrate plan`, `apply`, `inspect`) opens the directory itself when nobody holds it.
When a server that serves until stopped (`tsmigrate local serve`, or one in this very process)
holds it, the command talks to that server instead of opening the data a second time. When
another command's embedded instance holds it, the command waits for it to finish (talking to it
would break when it exits), then opens the directory; it gives up after `wait_s` with an error
naming the holder.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from tsmigrate.local.ownership import EMBEDDED_ROLE, DataDirInUse, Holder
from tsmigrate.local.testing import LocalTablestore, local_tablestore

WAIT_S = 300.0
_POLL_S = 0.1


@contextmanager
def embedded_instance(
    data_dir: str,
    instance: str,
    *,
    wait_s: float = WAIT_S,
    on_wait: Callable[[Holder | None], None] | None = None,
) -> Iterator[LocalTablestore | Holder]:
    """A server of our own over `data_dir` (a `LocalTablestore`), or the `Holder` of the running
    server to talk to. `on_wait` is called once when the directory is busy and we wait."""
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        opened = ExitStack()
        try:
            ots = opened.enter_context(
                local_tablestore(memory=False, data_dir=data_dir, instance=instance, role=EMBEDDED_ROLE)
            )
        except DataDirInUse as busy:
            holder = busy.holder
            if holder is not None and (holder.joinable or holder.pid == os.getpid()):
                yield holder
                return
            if time.monotonic() >= deadline:
                raise DataDirInUse(data_dir, holder) from None
            if not waited and on_wait is not None:
                on_wait(holder)
            waited = True
            time.sleep(_POLL_S)
            continue
        with opened:
            yield ots
        return

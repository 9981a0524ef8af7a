"""What ``tsmigrate apply`` shows of a reindex: a line per stage (so logs without a terminal
say where it is), a progress bar of the rebuild (rows indexed of the table's, rows/s, ETA, then
the incremental sync's lag), and a line every ``every_s`` seconds while a stage waits."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

STAGE_TEXT = {
    "create": "create {index}_reindex from {index} with the new schema",
    "build": "build {index}_reindex from the table's rows, then catch up with writes",
    "verify": "run the access patterns on both indexes",
    "shift": "shift query traffic to {index}_reindex",
    "switch": "switch: {index} serves the new schema",
    "drop": "drop {index}_reindex (the old schema)",
}


class ReindexProgress:
    def __init__(self, console: Console, every_s: float | None = None):
        from tsmigrate.instance.pipeprogress import every_s as default_every_s

        self.console = console
        self.every_s = default_every_s() if every_s is None else every_s
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._next_line = 0.0
        self._pipe: Any = None  # a PipeProgress while a build runs without a terminal

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        where = f"{data['table']}.{data['index']}"
        if event == "stage":
            self.close()
            resumed = " (resumed at this stage)" if data.get("resumed") else ""
            text = STAGE_TEXT[data["stage"]].format(index=data["index"])
            self.console.print(f"reindex {where}: stage {data['stage']}: {text}{resumed}",
                               markup=False)
            self._next_line = time.monotonic() + self.every_s
        elif event == "build":
            self._build(where, data)
        elif event == "verified":
            for check in data["checks"]:
                self.console.print(f"  same answers: {check}", markup=False)
        elif event == "shift":
            self.console.print(f"  {data['weight']}% of the searches on {data['index']} go to "
                               f"{data['index']}_reindex", markup=False)
        elif event in ("hold", "wait"):
            if time.monotonic() >= self._next_line:
                what = (f"holding {data['weight']}% for {data['hold_s']:.0f} s"
                        if event == "hold" else f"waiting for {data['what']}")
                self.console.print(f"  {what} ({data['elapsed_s']:.0f} s)", markup=False)
                self._next_line = time.monotonic() + self.every_s
        elif event == "done":
            self.close()
            self.console.print(f"reindex {where}: done; {data['index']} serves the new schema",
                               markup=False)
        elif event == "abandoned":
            self.console.print(f"reindex {where}: the models no longer ask for it; its "
                               f"{data['index']}_reindex was dropped (it was at stage "
                               f"{data['stage']})", markup=False)

    def _build(self, where: str, data: dict[str, Any]) -> None:
        phase = data["phase"]
        detail = (f"{data['indexed']:,} of {data['total']:,} rows indexed" if phase == "full"
                  else f"incremental sync, lag {data['lag_s']:.1f} s")
        if not self.console.is_terminal:  # a pipe: a plain line every few seconds, no bar
            self._pipe_build(where, data)
            return
        if self._bar is None:
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                                 TimeRemainingColumn(), console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(f"rebuild {where}", total=None, rate="")
        elapsed = max(data["elapsed_s"], 1e-3)
        rate = f"{data['indexed'] / elapsed:,.0f} rows/s" if phase == "full" else detail
        assert self._task is not None
        self._bar.update(self._task, completed=data["indexed"], total=data["total"] or None,
                         rate=rate)
        if time.monotonic() >= self._next_line:
            self.console.print(f"  {detail} ({data['elapsed_s']:.0f} s)", markup=False)
            self._next_line = time.monotonic() + self.every_s

    def _pipe_build(self, where: str, data: dict[str, Any]) -> None:
        from tsmigrate.instance.pipeprogress import PipeProgress

        if self._pipe is None:
            self._pipe = PipeProgress(self.console, f"reindex {where}")
        if data["phase"] != "full":
            self._pipe.update("incremental sync", detail=f"lag {data['lag_s']:.1f} s")
            return
        rate = data["indexed"] / max(data["elapsed_s"], 1e-3)
        total = data["total"] or None
        eta = (total - data["indexed"]) / rate if total is not None and rate > 0 else None
        self._pipe.update("build", data["indexed"], total, rate, eta)

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.stop()
            self._pipe = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

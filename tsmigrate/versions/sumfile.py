"""``migrations/tsmigrate.sum``: the scripts' integrity file, like Atlas's ``atlas.sum``.

One line per script, in the revision graph's order (parents first, ties by id), each with a hash
chained over every script before it (``sha256`` of file name and content, cumulatively), and a
first line with the hash of the whole directory::

    h1:Lq1pk6i8M1qYo+1xIr0nG8jvGtVZ8bU9FcmQ2Ec9pGs=
    3f2a9c1e5b7d_create_tables.py h1:...
    9b1c0d7e4a21_add_index.py h1:...

``revision`` and ``merge`` rewrite it. A script edited afterwards changes its line and every line
after it; two revisions added on parallel branches both change the first line and append a line,
so git reports a conflict and ``tsmigrate check`` fails until ``merge`` joins the heads.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import attrs

from tsmigrate.versions.errors import SumMismatchError
from tsmigrate.versions.scripts import SUM_FILE, ScriptDirectory


def _h1(digest: bytes) -> str:
    return "h1:" + base64.b64encode(digest).decode()


@attrs.frozen
class SumFile:
    total: str
    lines: tuple[tuple[str, str], ...]  # (file name, chained hash)

    def text(self) -> str:
        return "".join([f"{self.total}\n", *(f"{name} {digest}\n" for name, digest in self.lines)])

    @classmethod
    def parse(cls, text: str, where: str) -> SumFile:
        rows = [line for line in text.splitlines() if line.strip()]
        if not rows or not rows[0].startswith("h1:"):
            raise SumMismatchError(f"{where} is not a sum file (its first line must be h1:...); "
                                   "run `tsmigrate hash` to write it again")
        lines = []
        for number, row in enumerate(rows[1:], 2):
            name, _, digest = row.rpartition(" ")
            if not name or not digest.startswith("h1:"):
                raise SumMismatchError(f"{where}:{number}: expected '<file> h1:<hash>', got {row!r} "
                                       "(a merge conflict left in it?); resolve the scripts, then "
                                       "run `tsmigrate hash`")
            lines.append((name, digest))
        return cls(rows[0].strip(), tuple(lines))


def compute(directory: ScriptDirectory) -> SumFile:
    running = hashlib.sha256()
    lines = []
    for script in directory.in_order():
        running.update(script.filename.encode())
        running.update(script.source)
        lines.append((script.filename, _h1(running.copy().digest())))
    return SumFile(_h1(running.digest()), tuple(lines))


def sum_path(directory: ScriptDirectory) -> str:
    return f"{directory.location.prefix}/{SUM_FILE}"


def read(directory: ScriptDirectory) -> SumFile | None:
    file = directory.location.files.joinpath(SUM_FILE)
    if not file.is_file():
        return None
    return SumFile.parse(file.read_text(encoding="utf-8"), sum_path(directory))


def write(directory: ScriptDirectory) -> Path:
    """Write the sum of the scripts as they are now; the path written."""
    path = directory.location.writable() / SUM_FILE
    path.write_text(compute(directory).text(), encoding="utf-8")
    return path


def differences(directory: ScriptDirectory) -> list[str]:
    """What differs between the scripts and the sum file, in words (empty: they match)."""
    try:
        recorded = read(directory)
    except SumMismatchError as exc:  # not a sum file any more (a merge conflict left in it)
        return [str(exc)]
    actual = compute(directory)
    if recorded is None:
        return [f"{sum_path(directory)} is missing"] if actual.lines else []
    if recorded == actual:
        return []
    out = []
    names = [n for n, _ in actual.lines]
    known = [n for n, _ in recorded.lines]
    added = [n for n in names if n not in known]
    removed = [n for n in known if n not in names]
    if added:
        out.append(f"not in the sum (added without `tsmigrate revision`, or on another branch): "
                   f"{', '.join(added)}")
    if removed:
        out.append(f"in the sum but gone: {', '.join(removed)}")
    if not added and not removed:
        first = next((a for a, r in zip(actual.lines, recorded.lines, strict=True) if a != r), None)
        if first is not None:
            out.append(f"{first[0]} was edited after the sum was written (or the scripts' order "
                       "changed): every line from it on differs")
        else:
            out.append("the total hash (first line) was edited")
    return out


def verify(directory: ScriptDirectory) -> None:
    """SumMismatchError listing what differs, or nothing."""
    found = differences(directory)
    if found:
        raise SumMismatchError(
            f"{sum_path(directory)} does not match the scripts: {'; '.join(found)}. If the change "
            "is deliberate (no instance has applied the old content), run `tsmigrate hash`"
        )

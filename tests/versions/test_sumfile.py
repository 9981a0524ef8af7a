"""tsmigrate.sum over random revision graphs: any edit, addition or removal is found."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scriptdir import dags, write_script

from tsmigrate.versions import sumfile
from tsmigrate.versions.scripts import ScriptDirectory


def _load(root: Path) -> ScriptDirectory:
    return ScriptDirectory.load("migrations", root)


@settings(max_examples=40)
@given(dags(max_size=8), st.data())
@pytest.mark.slow
def test_the_sum_finds_every_change(parents, data):
    if not parents:
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = {rev: write_script(root / "migrations", f"r{rev}", tuple(f"r{p}" for p in ps) or None)
                 for rev, ps in parents.items()}
        sumfile.write(_load(root))
        sumfile.verify(_load(root))
        lines = sumfile.read(_load(root)).lines
        assert [name for name, _ in lines] == [s.filename for s in _load(root).in_order()]

        edited = data.draw(st.sampled_from(sorted(parents)))
        original = paths[edited].read_text()
        paths[edited].write_text(original + "\n# edited\n")
        found = sumfile.differences(_load(root))
        assert found == [f"{paths[edited].name} was edited after the sum was written (or the "
                         "scripts' order changed): every line from it on differs"]
        paths[edited].write_text(original)
        assert sumfile.differences(_load(root)) == []

        # A new head added without the sum, as on another branch.
        head = sorted(parents)[0]
        extra = write_script(root / "migrations", "zz_new", f"r{head}")
        assert sumfile.differences(_load(root))[0].endswith(extra.name)
        assert sumfile.compute(_load(root)).total != sumfile.read(_load(root)).total
        extra.unlink()
        leaf = _load(root).graph.heads[0]
        removed = next(p for rev, p in paths.items() if f"r{rev}" == leaf)
        removed.unlink()
        assert sumfile.differences(_load(root)) == [f"in the sum but gone: {removed.name}"]

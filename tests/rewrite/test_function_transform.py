"""rewrite_table(..., transform=fn): a key no derivation expresses, computed by a function of a
migration script, which every worker (threads, processes, a resumed run) loads by reference."""

from __future__ import annotations

import functools
import importlib.util
import textwrap

import pytest
import tablestore as ts

from tsmigrate.contract import functions
from tsmigrate.contract.functions import FunctionError
from tsmigrate.instance import adapter
from tsmigrate.instance.apply import apply
from tsmigrate.planning import ops
from tsmigrate.rewrite import driver, executors, planned
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.schema import Catalog, PrimaryKeyColumn, Table

SOURCE = Table("codes", [PrimaryKeyColumn("code", "STRING")])
TARGET = Table("codes_by_region", [PrimaryKeyColumn("region", "STRING"), PrimaryKeyColumn("code", "STRING")],
               replaces="codes")
SCRIPT = textwrap.dedent('''
    REGIONS = {"1": "eu", "2": "us"}


    def by_region(values):
        """region from the code's first digit: a lookup, which no derivation expresses."""
        return {**values, "region": REGIONS.get(values["code"][0], "other")}
''')


def _load_script(path):
    spec = importlib.util.spec_from_file_location("a_revision_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_script_function_is_referenced_by_its_file_and_loaded_again(tmp_path) -> None:
    path = tmp_path / "0001_by_region.py"
    path.write_text(SCRIPT)
    fn = _load_script(path).by_region
    ref = functions.reference(fn, "transform")
    assert ref == f"{path.resolve()}:by_region"
    assert functions.resolve(ref)({"code": "17"})["region"] == "eu"
    assert functions.reference(adapter.inspect, "x") == "tsmigrate.instance.adapter:inspect"
    with pytest.raises(FunctionError, match="top level"):
        functions.reference(lambda v: v, "op.rewrite_table's transform")
    with pytest.raises(FunctionError, match="cannot be loaded"):
        functions.resolve(f"{tmp_path}/gone.py:by_region", "transform")
    with pytest.raises(FunctionError, match="defines no nothing"):
        functions.resolve(f"{path}:nothing", "transform")


@pytest.mark.parametrize("processes", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_rewrite_with_a_script_transform_runs_to_ready(
    ots_instance, tmp_path, monkeypatch, processes
) -> None:
    path = tmp_path / "0002_by_region.py"
    path.write_text(SCRIPT)
    ref = functions.reference(_load_script(path).by_region, "transform")
    client = ots_instance.client()
    apply(client, Catalog([SOURCE]), target_identity="local:test")
    for code in ("10", "11", "25", "39"):
        client.put_row(SOURCE.name, ts.Row([("code", code)], [("n", int(code))]))
    live = Catalog([adapter.inspect_table(client, SOURCE.name)])
    models = Catalog([SOURCE, TARGET])
    adapter.execute(client, ops.CreateTable(TARGET.name, TARGET))
    step = ops.RewriteTable(TARGET.name, SOURCE.name, "a region in front")
    planned.start(client, live, models, step, custom=ref)
    if processes:  # the workers are other processes: they load the script from its file
        monkeypatch.setattr(executors, "InProcessExecutor",
                            functools.partial(executors.InProcessExecutor, processes=True))
    # One worker process is started (four rows are one split): it shows the same, at half the
    # start-up of two.
    workers = 1 if processes else 2
    rewrite = planned.run(client, TARGET.name, RewriteSettings(options=driver.RunOptions(workers=workers)))
    assert rewrite.phase == "ready"
    start = [("region", ts.INF_MIN), ("code", ts.INF_MIN)]
    end = [("region", ts.INF_MAX), ("code", ts.INF_MAX)]
    _, _, rows, _ = client.get_range(TARGET.name, "FORWARD", start, end)
    assert [[v for _, v in r.primary_key] for r in rows] == [
        ["eu", "10"], ["eu", "11"], ["other", "39"], ["us", "25"]]

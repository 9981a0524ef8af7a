"""`tsmigrate plan` refuses a secondary index whose name another table or index already holds
(index names are unique in the instance), instead of an apply that fails midway."""

from __future__ import annotations

from pathlib import Path

from clirun import run as _run

OLD = """
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey

class Reading(Model, table="readings"):
    device = PrimaryKey(str)
    ts = PrimaryKey(int)
    region = Column(str, defined=True)
    by_region = GlobalIndex(keys=["region"])
"""

# The mistake: the replacing table keeps the old table's index name.
NEW = OLD.replace('class Reading(Model, table="readings"):',
                  'class ReadingV2(Model, table="readings_v2", replaces="readings"):').replace(
    "    device = PrimaryKey(str)", "    region_key = PrimaryKey(str)\n    device = PrimaryKey(str)")

MONTHLY = """
from datetime import datetime
from tsmigrate import Column, GlobalIndex, Model, PrimaryKey
from tsmigrate.schema.families import Monthly

class Snap(Model, table="snaps", family=Monthly("captured_at", ahead=1)):
    keyword = PrimaryKey(str)
    captured_at = PrimaryKey(datetime)
    url = Column(str, defined=True)
    by_url = GlobalIndex(keys=["url"])
"""


def _models(root: Path, source: str) -> None:
    (root / "pyproject.toml").write_text('[tool.tsmigrate]\nmodels = ["app_models"]\n')
    (root / "app_models.py").write_text(source)


def test_a_replacing_table_that_keeps_the_old_index_name_is_a_plan_error(tmp_path):
    _models(tmp_path, OLD)
    assert _run(tmp_path, "apply", "--yes").returncode == 0
    _models(tmp_path, NEW)
    for command in (("plan",), ("apply", "--yes")):
        refused = _run(tmp_path, *command)
        assert refused.returncode == 1, refused.stdout
        assert "Traceback" not in refused.stderr
        assert ("ReadingV2 (table 'readings_v2'), index by_region: step 1 creates index "
                "'by_region', but the instance already has index 'by_region' of table "
                "'readings'") in refused.stderr
        assert "[instance.name-taken]" in refused.stderr
        assert "name='readings_v2_by_region'" in refused.stderr
    assert "readings_v2" not in _run(tmp_path, "inspect").stdout  # nothing was created


def test_a_family_whose_months_share_an_index_name_is_a_plan_error(tmp_path):
    _models(tmp_path, MONTHLY)
    refused = _run(tmp_path, "plan")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "index by_url: step 2 creates index 'by_url', but step 1 of this plan creates index " \
        "'by_url' of table 'snaps_" in refused.stderr
    assert "[instance.name-taken]" in refused.stderr and "name='snaps_" in refused.stderr

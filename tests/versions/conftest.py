import pathlib
import sys

import pytest

# Helpers of the versioned-migration tests (``import scriptdir``), without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
# ``import cliproject`` (running the `tsmigrate` command in a temp project).
sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "engine"))


@pytest.fixture
def unpaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run in this process do not pace their table-level calls to the service's limit
    (10 a second): the local server has none, and waiting for the pacer only costs seconds.
    `tests/core/test_pacing.py` tests the pacer itself."""
    monkeypatch.setattr("tsmigrate.instance.target.paced", lambda client, per_second: client)


@pytest.fixture
def target(ots_instance, unpaced) -> list[str]:
    """The options that reach a fresh, empty instance of this worker's in-process local server
    (the `tsmigrate_local` plugin's): a target for commands, cheaper than a server process."""
    return ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]

import pathlib
import sys

import pytest

# Helpers of the engine tests (``import cliproject``), without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from cliproject import PacingClock


@pytest.fixture(autouse=True)
def pacing_without_waits(monkeypatch) -> PacingClock:
    """A command run in this process against an endpoint paces its table operations to the
    service's 10 a second; the local servers here have no such limit (unless a test sets one),
    so the pacer's waits pass on its own clock instead of in real time. A test whose server does
    limit the rate installs ``PacingClock(server)``, which moves the server's clock alike."""
    return PacingClock().install(monkeypatch)

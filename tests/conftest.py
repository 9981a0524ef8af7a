import logging
import pathlib
import socket
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# Make shared test helpers importable (``import strategies``) without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

# The machine is shared and noisy: timing-based failures would be flakes, not findings.
settings.register_profile(
    "tsmigrate", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("tsmigrate")

# The SDK formats every request's whole protobuf as text when its logger lets DEBUG through
# (NOTSET does): 15-25% of an SDK-heavy test. Its errors still show.
logging.getLogger("tablestore-client").setLevel(logging.INFO)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: two workers a CPU. Many integration tests spend seconds waiting (a fence's
    lease, a late-write bound, a request held in the network, writers against a cut-over) with
    the CPU idle, and other workers run during those waits: on this 2-core machine the suite
    took 232 s with 4 workers against 337 s with 3 (same commit, be5aa71; the 3-worker run
    shared the machine with more other work), and 261 s with 3 against 280 to 297 s with 2
    earlier."""
    import os

    return 2 * (os.cpu_count() or 1)


def _short_write_samples() -> None:
    """Prepare watches the source's stream for its write rate (``capacity.SAMPLE_S``, 2 s; plan
    half as long when the stream is on): 50 ms here, where many tests prepare a rewrite. Tests
    of the rate itself set their own."""
    from tsmigrate.rewrite import capacity

    capacity.SAMPLE_S = 0.05


_short_write_samples()


@pytest.fixture
def refused_endpoint() -> Iterator[str]:
    """An address that refuses connections: a port bound here and never listened on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()

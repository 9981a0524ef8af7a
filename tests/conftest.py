import logging
import pathlib
import sys

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

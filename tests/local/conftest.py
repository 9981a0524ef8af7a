import pathlib
import sys

# Shared helpers of these tests (``import rawhttp``) without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

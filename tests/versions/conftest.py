import pathlib
import sys

# Helpers of the versioned-migration tests (``import scriptdir``), without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

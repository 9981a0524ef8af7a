import pathlib
import sys

# Helpers of the versioned-migration tests (``import scriptdir``), without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
# ``import cliproject`` (running the `tsmigrate` command in a temp project).
sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "engine"))

import pathlib
import sys

# Make shared test helpers importable (``import strategies``) without __init__.py files.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

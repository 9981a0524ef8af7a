"""tsmigrate: declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""

__version__ = "0.1.0"

import logging as _logging

# The SDK warns on import that its optional C++ codec is missing (it uses Python's): a notice,
# not a fault, that would open every service script's and test run's output. Set before any
# tsmigrate module imports the SDK; its other warnings still show.
for _name in ("tablestore.encoder", "tablestore.decoder"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)

from tsmigrate.schema.model import (  # noqa: E402 (after the SDK logger is set)
    AccessPattern,
    Column,
    GlobalIndex,
    LocalIndex,
    Model,
    PrimaryKey,
    SearchField,
    SearchIndex,
)

__all__ = [
    "AccessPattern",
    "Column",
    "GlobalIndex",
    "LocalIndex",
    "Model",
    "PrimaryKey",
    "SearchField",
    "SearchIndex",
    "__version__",
]

"""tsmigrate: declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""

__version__ = "0.1.0"

from tsmigrate.model import (
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

"""tsmigrate: declarative schema-as-code and migrations for Alibaba Cloud Tablestore."""

__version__ = "0.1.0"

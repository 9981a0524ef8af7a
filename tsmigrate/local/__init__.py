"""A local, Tablestore-compatible server speaking the service's wire protocol.

This package imports nothing else from tsmigrate, so it can be used (and shipped) on its own.
"""

"""The primary-key rewrite engine: copy a table into one with a new key, online and verified."""

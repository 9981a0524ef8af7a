"""A custom transform for tests: importable as ``tests_custom_transform:upper``."""


def upper(values: dict) -> dict:
    if values["id"] == "boom":
        raise ValueError("boom")
    return {**values, "id": values["id"].upper()}

"""pytest fixtures for services that use tsmigrate models (registered as `tsmigrate_service`).

- `tsmigrate_models`: the model classes to create; by default every model of the project
  (``[tool.tsmigrate] models`` in the nearest pyproject.toml). Override it in a conftest.py to
  choose: ``@pytest.fixture def tsmigrate_models(): return [Account, Order]``.
- `ots_models` (function): a fresh, empty local instance (``ots_instance``) with the tables of
  those models created, indexes and a family's current months included; ``.client``,
  ``.rows(Model)`` (a ``Rows``), ``.async_rows(Model, async_client)``, ``.instance``.

Built on the local server's fixtures (``ots_instance``, ``ots_server_options``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


class ModelInstance:
    """A fresh local instance holding the models' tables."""

    def __init__(self, instance: Any, models: Sequence[type]):
        self.instance = instance
        self.models = list(models)
        self.client = instance.client()

    def rows(self, model: type, **kwargs: Any) -> Any:
        from tsmigrate.service import Rows

        return Rows(model, self.client, **kwargs)

    def async_rows(self, model: type, async_client: Any, **kwargs: Any) -> Any:
        from tsmigrate.service import AsyncRows

        return AsyncRows(model, async_client, **kwargs)


@pytest.fixture
def tsmigrate_models(request: pytest.FixtureRequest) -> list[type]:
    """The models whose tables ``ots_models`` creates: the project's, unless overridden."""
    from tsmigrate.lint import settings_problems
    from tsmigrate.schema.config import load_project, register_check
    from tsmigrate.schema.discover import import_models

    register_check("lint", settings_problems)  # schema cannot import lint: wired here, as commands do
    project = load_project(request.config.rootpath)
    return import_models(project.models, project.root)


@pytest.fixture
def ots_models(ots_instance: Any, tsmigrate_models: Sequence[type]) -> ModelInstance:
    """A fresh local instance with the tables of ``tsmigrate_models`` created."""
    from tsmigrate.service import create_tables

    created = ModelInstance(ots_instance, tsmigrate_models)
    create_tables(created.client, created.models)
    return created

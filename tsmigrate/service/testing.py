"""Tables for a service's own tests: create the models' tables in a (fresh, local) instance.

    @pytest.fixture
    def telemetry(ots_instance):
        client = ots_instance.client()
        create_tables(client, [Telemetry])
        return Rows(Telemetry, client)
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from tsmigrate.schema.model import Model, compile_models


def create_tables(client: Any, models: Iterable[type[Model]], *, now: datetime | None = None) -> None:
    """Bring the instance in line with ``models`` (tables, secondary and search indexes; a
    family's months as of ``now``), the way ``tsmigrate apply`` does."""
    from tsmigrate.instance.apply import apply

    apply(client, compile_models(models), target_identity="tests",
          now=now or datetime.now(timezone.utc))

"""What a split task is given travels intact, and carries no secret."""

from __future__ import annotations

import pickle

import pytest
import rewrite_tables as rt

from tsmigrate.errors import ConfigError
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob


def test_a_job_survives_pickling_and_its_json_form() -> None:
    job = RewriteJob("j1", rt.SOURCE, rt.TARGET, max_rows_per_s=500.0, custom="mod:fn", created_ms=42)
    assert pickle.loads(pickle.dumps(job)) == job
    assert RewriteJob.from_json(job.to_json()) == job


def test_a_connection_spec_reads_credentials_where_it_runs(monkeypatch) -> None:
    spec = ConnectionSpec("http://127.0.0.1:1", "inst")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "id-from-env")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "a-secret")
    assert b"a-secret" not in pickle.dumps(spec)
    assert spec.client().credentials_provider.get_credentials().get_access_key_id() == "id-from-env"
    monkeypatch.delenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
    with pytest.raises(ConfigError, match="ALIBABA_CLOUD_ACCESS_KEY_SECRET"):
        spec.client()

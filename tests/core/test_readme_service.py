"""The README's section for service authors ("Using the models in a service"): its parts come in
the order a service author needs them, its examples run as written against a local server, and
its table of errors names every error `tsmigrate.service` exports."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import tsmigrate.service
from tsmigrate.schema.model import forget_models, registered_models

REPO = Path(__file__).resolve().parents[2]
HEADING = "## Using the models in a service"


def _section() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]


def _part(title: str) -> str:
    return _section().split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]


def _python_blocks(text: str) -> list[str]:
    """The ```python blocks of ``text``, indented ones (in a list item) included, dedented."""
    return [textwrap.dedent(code)
            for _, code in re.findall(r"^( *)```python\n(.*?)^\1```", text, re.S | re.M)]


@pytest.fixture
def forgets_models():
    """The examples declare models; the registry forgets them afterwards."""
    keep = len(registered_models())
    yield
    forget_models(keep)


def test_the_parts_come_in_the_order_a_service_author_needs_them():
    headings = re.findall(r"^### (.+)$", _section(), re.M)
    assert headings[:4] == ["Building a client", "Credentials", "Rows and AsyncRows",
                            "Errors to handle"]
    assert "Testing a service" in headings


def test_the_client_part_says_where_each_local_instance_keeps_its_data():
    part = " ".join(_part("Building a client").split())  # the words, however the lines wrap
    assert "keeps its data in `.tsmigrate/local`" in part
    assert "`tsmigrate local serve --data .tsmigrate/local`" in part
    assert ("Plain `tsmigrate local serve`, without `--data`, is another instance: its tables are "
            "in memory") in part
    assert "`export $(tsmigrate local endpoint)`" in part and "local_tablestore()" in part


def test_the_credentials_part_names_the_variables_and_the_local_key():
    part = _part("Credentials")
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                 "ALIBABA_CLOUD_SECURITY_TOKEN", "TSMIGRATE_LOCAL_SECRET", "sts_token="):
        assert name in part
    from tsmigrate.local.auth import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET

    assert f"id `{DEFAULT_ACCESS_KEY_ID}`, secret `{DEFAULT_ACCESS_KEY_SECRET}`" in part


def test_the_local_tablestore_example_runs(forgets_models):
    (example,) = _python_blocks(_part("Building a client"))
    exec(compile(example, "README: Building a client", "exec"), {"__name__": "readme_example"})


def test_the_rows_examples_run_as_written(ots_instance, monkeypatch, capsys, forgets_models):
    """The example builds its client from the environment, as the README says to run it against
    a local server; the AsyncRows example continues it (same namespace)."""
    monkeypatch.setenv("TSMIGRATE_ENDPOINT", ots_instance.endpoint)
    monkeypatch.setenv("TSMIGRATE_INSTANCE", ots_instance.instance)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", ots_instance.access_key_id)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", ots_instance.access_key_secret)
    monkeypatch.delenv("ALIBABA_CLOUD_SECURITY_TOKEN", raising=False)
    blocks = _python_blocks(_part("Rows and AsyncRows"))
    assert len(blocks) >= 2 and "OTSClient(" in blocks[0] and "AsyncRows(" in blocks[1]
    namespace = {"__name__": "readme_example"}
    for number, code in enumerate(blocks[:2]):
        exec(compile(code, f"README: Rows and AsyncRows, example {number + 1}", "exec"), namespace)
    printed = capsys.readouterr().out
    assert printed == "95 999 [80, None]\n"
    assert "# 95 999 [80, None]" in blocks[0]  # what the README says it prints
    # Run again (a script run twice): the idempotent create and the batch still succeed.
    exec(compile(blocks[0], "README: Rows and AsyncRows, example 1", "exec"), dict(namespace))
    assert capsys.readouterr().out == printed


def test_the_error_table_names_every_error_the_service_exports():
    part = _part("Errors to handle")
    rows = re.findall(r"^\| `([\w.]+)`", part, re.M)
    exported = sorted(name for name in tsmigrate.service.__all__
                      if isinstance(getattr(tsmigrate.service, name), type)
                      and issubclass(getattr(tsmigrate.service, name), BaseException))
    assert exported and set(exported) <= set(rows), set(exported) - set(rows)
    assert "tablestore.OTSServiceError" in rows
    assert "#### Retries" in part and "RETRY_POLICY" in part

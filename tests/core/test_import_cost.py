"""What commands import: every `tsmigrate` command is a fresh interpreter that pays for its
imports, so the copy engine and the model API load only where they are used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tsmigrate.service as service


def _loaded_by(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    return set(done.stdout.split())


def test_plan_and_apply_load_the_rewrite_driver_without_the_copy_engine():
    loaded = _loaded_by("import tsmigrate.cli, tsmigrate.instance.apply, tsmigrate.rewrite.driver")
    assert "tsmigrate.rewrite.driver" in loaded
    assert loaded & {"tsmigrate.rewrite.capture", "tsmigrate.rewrite.copy"} == set()


def test_the_cut_over_loads_the_rewrite_contract_and_no_service_module():
    """What the cut-over shares with routing (its timing, the heartbeat rows) is the contract's."""
    loaded = _loaded_by("import tsmigrate.rewrite.cutover")
    assert {"tsmigrate.contract.routes", "tsmigrate.contract.staterow"} <= loaded
    assert {m for m in loaded if m == "tsmigrate.service" or m.startswith("tsmigrate.service.")} == set()


@pytest.mark.parametrize("name", service.__all__)
def test_each_public_name_of_the_service_package_is_its_modules_own(name):
    value = getattr(service, name)
    assert value.__module__.startswith("tsmigrate.service.")
    assert getattr(sys.modules[value.__module__], name) is value
    assert name in dir(service)


def test_the_service_package_star_import_gives_every_public_name():
    namespace: dict[str, object] = {}
    exec("from tsmigrate.service import *", namespace)
    assert set(service.__all__) <= set(namespace)


def test_an_unknown_name_of_the_service_package_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Rowz'"):
        service.Rowz  # noqa: B018
    with pytest.raises(ImportError):
        exec("from tsmigrate.service import Rowz", {})


@pytest.mark.parametrize(("preset", "expected"), [(None, "1"), ("3", "3")])
def test_commands_start_openblas_with_one_thread_unless_told_otherwise(monkeypatch, preset, expected):
    """numpy, imported by the SDK where installed, would start a BLAS thread per core."""
    if preset is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset)
    code = "import os, tsmigrate.cli, tablestore; print(os.environ['OPENBLAS_NUM_THREADS'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.split()[-1] == expected

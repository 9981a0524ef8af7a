"""The local server loads only what it needs: itself, the wire protocol and tsmigrate's errors,
never the model, schema or engine layers (``tsmigrate/__init__`` loads its declarations on
first use)."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_NEEDS = ("tsmigrate.local", "tsmigrate.wire", "tsmigrate.errors")


def _modules_after(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=120, check=True)
    return [m for m in json.loads(done.stdout.splitlines()[-1]) if m.split(".")[0] == "tsmigrate"]


def test_importing_the_local_server_loads_the_server_and_the_wire_only():
    loaded = _modules_after("import tsmigrate.local.server")
    assert "tsmigrate.local.server" in loaded and "tsmigrate.wire.plainbuffer" in loaded
    others = [m for m in loaded if m != "tsmigrate" and not m.startswith(SERVER_NEEDS)]
    assert others == []


def test_the_package_loads_its_declarations_on_first_use():
    assert _modules_after("import tsmigrate") == ["tsmigrate"]
    loaded = _modules_after("from tsmigrate import Model, Monthly\nassert Model.__name__ == 'Model'")
    assert {"tsmigrate.schema.model", "tsmigrate.schema.families"} <= set(loaded)
    names = subprocess.run([sys.executable, "-c", "import tsmigrate; print(' '.join(dir(tsmigrate)))"],
                           capture_output=True, text=True, timeout=60, check=True).stdout.split()
    import tsmigrate

    assert set(tsmigrate.__all__) <= set(names)
    try:
        tsmigrate.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'NoSuchThing'" in str(exc)
    else:
        raise AssertionError("a misspelt name must raise AttributeError")

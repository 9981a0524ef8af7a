"""Migrations shipped as a Python package: a wheel of a schema package holding `migrations/`,
installed apart from any checkout, upgrades an instance from another directory with
`migrations = "billing_schema:migrations"`; the state records the distribution and version, and
an older wheel is refused (unless --allow-older). Building and installing the wheels are
processes (pip); the commands run in this process, the package importable from its install
directory only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import clirun
import pytest
from cliproject import CREDENTIALS
from scriptdir import write_script

SCRIPTS = {
    "a1": (None, "op.create_table(Event)", "op.drop_table('events')", """
        from tsmigrate import Column, Model, PrimaryKey


        class Event(Model, table="events"):
            id = PrimaryKey(str)
            n = PrimaryKey(int)
            payload = Column(str, defined=True)
    """, "events"),
    "b2": ("a1", "op.create_index('events', 'by_payload', keys=['payload'])",
           "op.drop_index('events', 'by_payload')", "", "index by payload"),
}


def _pip(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pip", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(*processes: subprocess.Popen) -> None:
    for process in processes:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output


def build_wheel(tmp: Path, version: str, revisions: list[str]) -> subprocess.Popen:
    """Start building a wheel of billing-schema ``version`` whose migrations hold ``revisions``
    (``wheel`` finds it once done)."""
    source = tmp / f"src-{version}"
    package = source / "billing_schema"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    for rev in revisions:
        parent, up, down, header, message = SCRIPTS[rev]
        write_script(package / "migrations", rev, parent, up, down, header=header, message=message)
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68", "wheel"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "billing-schema"\nversion = "{version}"\n\n'
        '[tool.setuptools]\npackages = ["billing_schema"]\n\n'
        '[tool.setuptools.package-data]\nbilling_schema = ["migrations/versions/*.py"]\n'
    )
    return _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(source))


def wheel(tmp: Path, version: str) -> Path:
    return next((tmp / "dist").glob(f"billing_schema-{version}-*.whl"))


def install(wheel: Path, target: Path) -> subprocess.Popen:
    return _pip("install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel))


def deploy(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`tsmigrate ARGS` from a directory holding only its pyproject.toml, the package importable
    from ``site`` only (as PYTHONPATH=site would make it); in this process, which forgets the
    package again afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        return clirun.run(cwd, *args, extra_env=CREDENTIALS)


@pytest.mark.slow
def test_a_wheel_upgrades_from_another_directory_and_an_older_one_is_refused(tmp_path: Path,
                                                                             target: list[str]) -> None:
    # Both wheels at once, then both installs: four pip processes, two at a time.
    _finish(build_wheel(tmp_path, "1.4.0", ["a1", "b2"]), build_wheel(tmp_path, "1.3.0", ["a1"]))
    new, old = tmp_path / "site-new", tmp_path / "site-old"
    _finish(install(wheel(tmp_path, "1.4.0"), new), install(wheel(tmp_path, "1.3.0"), old))
    deploy_dir = tmp_path / "deploy"
    deploy_dir.mkdir()
    (deploy_dir / "pyproject.toml").write_text(
        '[tool.tsmigrate]\nmigrations = "billing_schema:migrations"\nworkflow = "versioned"\n')
    assert not (deploy_dir / "migrations").exists() and not (deploy_dir / "billing_schema").exists()
    up = deploy(new, deploy_dir, "upgrade", "head", *target)
    assert up.returncode == 0, up.stderr
    assert "package resource billing_schema:migrations" in up.stdout
    assert "package: billing-schema 1.4.0" in up.stdout
    assert "now at b2" in up.stdout
    current = json.loads(deploy(new, deploy_dir, "current", "--format", "json", *target).stdout)
    assert current["heads"][0]["revision"] == "b2"
    assert current["migrated_by"]["dist"] == "billing-schema"
    assert current["migrated_by"]["version"] == "1.4.0"

    refused = deploy(old, deploy_dir, "upgrade", "head", *target)
    assert refused.returncode == 1
    assert "this is billing-schema 1.3.0, older than billing-schema 1.4.0" in refused.stderr
    assert "Traceback" not in refused.stderr
    # --allow-older passes the version check; the older package does not know b2.
    allowed = deploy(old, deploy_dir, "upgrade", "head", "--allow-older", *target)
    assert allowed.returncode == 1 and "does not hold" in allowed.stderr and "b2" in allowed.stderr

    missing = deploy(tmp_path / "empty-site", deploy_dir, "upgrade", "head", *target)
    assert missing.returncode == 1
    assert "cannot import package 'billing_schema'" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert os.listdir(deploy_dir) == ["pyproject.toml"]  # no checkout, nothing written

"""The wheel as a user installs it: into a fresh venv with its runtime dependencies only, run from outside
the source tree, a 2-rank numpy job through collective.run and spark_hvd.run on local[2] work."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from wheel_venvs import make_venv, wheel_option

pytestmark = pytest.mark.timeout(900)

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(scope="module")
def wheel(request: pytest.FixtureRequest) -> Path:
    return wheel_option(request.config)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("installed") / "venv", [f"{wheel}[spark]"])


def _clean_env(python: Path) -> dict[str, str]:
    # Nothing of the checkout or the test venv may leak in: no PYTHONPATH, the venv's python for Spark workers.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
    return env


def test_wheel_is_manylinux_and_ships_the_license(wheel: Path) -> None:
    assert "-manylinux_2_" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        licenses = [n for n in names if n.endswith("/LICENSE") and ".dist-info/" in n]
        assert licenses, names
        assert "Apache License" in archive.read(licenses[0]).decode()
        assert any(n.startswith("collective/_native.") and n.endswith(".so") for n in names)
        assert not any(n.startswith("tests/") for n in names)


def test_two_rank_numpy_job_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(installed), "-m", "collective.run", "-np", "2", "--timeout", "120",
                           str(SCRIPTS / "numpy_job.py")], cwd=tmp_path, env=_clean_env(installed),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if "numpy job ok" in line]
    assert len(lines) == 2, done.stdout
    site = str(installed.parent.parent / "lib")
    assert all(f"collective={site}" in line for line in lines), lines


def test_spark_hvd_run_works_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(installed), str(SCRIPTS / "spark_run_job.py")], cwd=tmp_path,
                          env=_clean_env(installed), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    report = json.loads(line.removeprefix("RESULTS "))
    site = str(installed.parent.parent / "lib")
    assert report["driver"].startswith(site), report
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["total"] == 3.0 and r["spark_hvd"].startswith(site) for r in report["ranks"]), report

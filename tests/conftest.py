import os
import sys
from typing import Iterator

import pytest

# Ranks of the test jobs must import this checkout, whatever directory pytest runs from.
os.environ.setdefault("PYTHONUNBUFFERED", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    # Tests of the package as installed (tests/install, the packed env on executors) need a built wheel;
    # `make wheel-test` builds this machine's and passes it. Without it they skip.
    parser.addoption("--wheel", default=None, help="path of a built spark-hvd wheel to test as installed")


@pytest.fixture(params=["shm", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def one_rank() -> Iterator[None]:
    """collective initialised as a one-rank job in the test's own process, and shut down after it."""
    import collective

    collective.init()
    yield
    collective.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _no_job_outlives_its_file() -> Iterator[None]:
    """A test file that leaves collective initialised in pytest's process fails here, by name, and is shut
    down: the next file in this worker would run as rank 0 of a one-rank job (an estimator's driver-side
    check of a transformation_fn, for one, would believe it ran on a rank)."""
    yield
    collective = sys.modules.get("collective")
    if collective is not None and collective.is_initialized():
        collective.shutdown()
        pytest.fail("this file left collective initialised in pytest's process: shut it down in the test "
                    "(the one_rank fixture does)")


@pytest.fixture
def store(tmp_path):
    """A fresh local Store for one test (the estimators' materialised data, checkpoints, runs)."""
    from spark_hvd import Store

    return Store.create(str(tmp_path / "store"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` starts with the slowest files (tests/slow_files_first.py); other modes are xdist's."""
    if config.getvalue("dist") != "loadfile":
        return None
    from slow_files_first import SlowestFilesFirst

    return SlowestFilesFirst(config, log)

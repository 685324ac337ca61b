import os

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

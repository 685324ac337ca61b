"""Fixtures for the data path: the local[2] Spark session of tests/spark, an S3 server (moto), Parquet splits."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

_SPARK_TESTS = Path(__file__).resolve().parent.parent / "spark"


def _spark_fixtures() -> Any:
    """tests/spark/conftest.py under another module name (two modules cannot both be 'conftest')."""
    if str(_SPARK_TESTS) not in sys.path:
        sys.path.insert(0, str(_SPARK_TESTS))
    spec = importlib.util.spec_from_file_location("spark_session_fixtures", _SPARK_TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


try:
    import pyspark  # noqa: F401
except ImportError:
    pass
else:
    _fixtures = _spark_fixtures()
    local_spark = _fixtures.local_spark


@pytest.fixture(scope="session")
def spark_environment() -> Iterator[None]:
    """What tests/spark's fixture of this name sets, without its registration of rank functions (which it
    undoes at the end of the session, and twice would fail)."""
    env = {"JAVA_HOME": _fixtures._java_home(), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs Spark (a JVM); select with -m spark")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[dict[str, Any]]:
    """A real S3-protocol server (moto) on 127.0.0.1 with one bucket; yields the Store's storage options."""
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials).create_bucket(
            Bucket="spark-hvd-tests")
        yield {"key": "testing", "secret": "testing",
               "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    finally:
        server.stop()
